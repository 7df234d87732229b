# run_squad.py in a clone, as in Google's repository: `python run_squad.py --helpshort`.
# The SQuAD fine-tuning runner is adapter_bert/run_squad.py; installed, run it from anywhere
# as `python -m adapter_bert.run_squad`. (No docstring here: --helpshort shows the runner's.)

from adapter_bert import run_squad

if __name__ == "__main__":
    run_squad.run()
