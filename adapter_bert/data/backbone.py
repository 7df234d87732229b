"""The pretrained backbone a run or a model starts from: its checkpoint, config and
vocabulary, resolved and checked against each other, the sequence length and the casing."""

import dataclasses
from typing import Optional

from absl import logging

from adapter_bert.data.tokenization import (check_vocab_matches_config, checkpoint_lower_case,
                                            load_tokenizer, validate_case_matches_checkpoint)
from adapter_bert.errors import UserError
from adapter_bert.model.checkpoints import BackboneFiles, resolve_backbone
from adapter_bert.model.config import BertConfig


@dataclasses.dataclass
class Backbone:
    """The pretrained network a run starts from."""

    files: BackboneFiles
    config: BertConfig
    tokenizer: object


def load_backbone(init_checkpoint: Optional[str], config_file: Optional[str],
                  vocab_file: Optional[str], do_lower_case: Optional[bool],
                  max_seq_length: Optional[int]) -> Backbone:
    """Resolves checkpoint, config and vocabulary and checks they fit the sequence length
    and the casing. `do_lower_case` None: as the checkpoint says (lower case when it says
    nothing); `max_seq_length` None: not checked here.

    Raises:
        UserError, CheckpointError, ConfigError, TokenizerError: with a clear message.
    """
    files = resolve_backbone(init_checkpoint, config_file, vocab_file)
    if files.vocab_file is None:
        raise UserError(f"no vocab.txt beside {files.weights}; pass --vocab_file")
    config = BertConfig.from_json_file(files.config_file)
    if max_seq_length is not None and max_seq_length > config.max_position_embeddings:
        raise UserError(f"Cannot use sequence length {max_seq_length} because the BERT model was "
                        f"only trained up to sequence length {config.max_position_embeddings} "
                        f"(--max_seq_length)")
    if do_lower_case is None:
        do_lower_case = checkpoint_lower_case(files.weights) is not False
    validate_case_matches_checkpoint(do_lower_case, files.weights)
    tokenizer = load_tokenizer(files.vocab_file, do_lower_case)
    check_vocab_matches_config(tokenizer, config, files.vocab_file)
    logging.info("Backbone: %s (%s), config %s, vocab %s", files.weights, files.format,
                 files.config_file, files.vocab_file)
    return Backbone(files, config, tokenizer)
