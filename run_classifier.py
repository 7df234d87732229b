# run_classifier.py in a clone, as in Google's repository: `python run_classifier.py --helpshort`.
# The GLUE fine-tuning runner is adapter_bert/run_classifier.py; installed, run it from anywhere
# as `python -m adapter_bert.run_classifier`. (No docstring here: --helpshort shows the runner's.)

from adapter_bert import run_classifier

if __name__ == "__main__":
    run_classifier.run()
