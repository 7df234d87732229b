# ablate_adapters.py in a clone, as in Google's repository: `python ablate_adapters.py --helpshort`.
# The adapter ablation runner is adapter_bert/ablate_adapters.py; installed, run it from anywhere
# as `python -m adapter_bert.ablate_adapters`. (No docstring here: --helpshort shows the runner's.)

from adapter_bert import ablate_adapters

if __name__ == "__main__":
    ablate_adapters.run()
