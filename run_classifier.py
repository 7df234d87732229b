# run_classifier.py for a clone, run as Google's script is: `python run_classifier.py --helpshort`.
# The runner is the module adapter_bert/run_classifier.py; installed, it runs from any
# directory as `python -m adapter_bert.run_classifier`. (No docstring here: --helpshort shows
# the runner's.)

from adapter_bert import run_classifier

if __name__ == "__main__":
    run_classifier.run()
