# run_squad.py for a clone, run as Google's script is: `python run_squad.py --helpshort`.
# The runner is the module adapter_bert/run_squad.py; installed, it runs from any
# directory as `python -m adapter_bert.run_squad`. (No docstring here: --helpshort shows
# the runner's.)

from adapter_bert import run_squad

if __name__ == "__main__":
    run_squad.run()
