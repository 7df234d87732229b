"""The runners' training recipe from plain arguments: step counts, warmup, optimizer.

`run_classifier.py` and `run_squad.py` train `int(examples / batch * epochs)` steps with
a linear warmup over `warmup_proportion` of them (lengthened when the peak rate is above
the step ceiling), then linear decay to 0, with the tuning mode's Adam variant
(`optimizer.choose_optimizer`) and gradients clipped to global norm 1. The runners read
the arguments from their flags (`runners.base`); the library passes them itself
(`fine_tuning_optimizer`, `library.text_classifier.TextClassifier`), so both train
with one recipe.
"""

import dataclasses
from typing import Dict, Optional

from adapter_bert.adapters.tuning import parameter_components
from adapter_bert.training.loop import TrainSchedule
from adapter_bert.training.optimizer import OptimizerChoice, choose_optimizer, create_optimizer


def schedule_for(choice: OptimizerChoice, num_examples: int, batch_size: int, epochs: float,
                 warmup_proportion: float) -> TrainSchedule:
    """Google's step counts for `epochs` passes, the warmup lengthened as `choice` needs.

    Raises:
        TrainingError: the arguments make no training step.
    """
    schedule = TrainSchedule.from_epochs(num_examples, batch_size, epochs, warmup_proportion)
    warmup = choice.warmup_steps(schedule.num_warmup_steps, schedule.num_train_steps)
    return dataclasses.replace(schedule, num_warmup_steps=warmup)


def optimizer_for(choice: OptimizerChoice, schedule: Optional[TrainSchedule], model=None):
    """The AdamW of `choice` driven by `schedule` (create it under the strategy scope);
    None: a `PlannedWarmupDecay` that each `TextClassifier.fit` plans.

    With `choice.adapter_learning_rate`, the `model`'s trainable adapter weights train at
    that rate instead.
    """
    steps = (None, 0) if schedule is None else (schedule.num_train_steps,
                                                schedule.num_warmup_steps)
    return create_optimizer(choice.learning_rate, *steps, bias_correction=choice.bias_correction,
                            epsilon=choice.epsilon,
                            rate_factors=adapter_rate_factors(choice, model),
                            step_ceiling=choice.step_ceiling)


def adapter_rate_factors(choice: OptimizerChoice, model) -> Dict[str, float]:
    """Variable name -> rate multiple for the adapters under `adapter_learning_rate`."""
    if choice.adapter_learning_rate is None:
        return {}
    factor = choice.adapter_learning_rate / choice.learning_rate
    return {variable.name: factor for variable, component in parameter_components(model)
            if component == "adapters" and variable.trainable}


def fine_tuning_optimizer(num_examples: int, batch_size: int = 32, epochs: float = 3.0,
                          tuning_mode: str = "adapter", learning_rate: Optional[float] = None,
                          warmup_proportion: float = 0.1):
    """The optimizer `run_classifier.py` trains with, for a Keras training of your own
    (`ab.fine_tuning_optimizer`).

    The arguments are the runner's flags (`--train_file`'s rows, `--train_batch_size`,
    `--num_train_epochs`, `--tuning_mode`, `--learning_rate`, `--warmup_proportion`) and
    give its optimizer: Google's schedule over `int(num_examples / batch_size * epochs)`
    steps, clipping, weight decay and the tuning mode's Adam variant and default rate.
    Create it in your strategy's scope and train for exactly that many steps. Raises
    TrainingError when the arguments make no step.
    """
    choice = choose_optimizer(tuning_mode, learning_rate)
    return optimizer_for(choice, schedule_for(choice, num_examples, batch_size, epochs,
                                              warmup_proportion))
