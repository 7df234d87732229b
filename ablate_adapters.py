# ablate_adapters.py for a clone: `python ablate_adapters.py --helpshort`.
# The runner is the module adapter_bert/ablate_adapters.py; installed, it runs from any
# directory as `python -m adapter_bert.ablate_adapters`. (No docstring here: --helpshort shows
# the runner's.)

from adapter_bert import ablate_adapters

if __name__ == "__main__":
    ablate_adapters.run()
