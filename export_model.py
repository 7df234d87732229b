# export_model.py in a clone, as in Google's repository: `python export_model.py --helpshort`.
# The multi-adapter SavedModel export runner is adapter_bert/export_model.py; installed, run it from anywhere
# as `python -m adapter_bert.export_model`. (No docstring here: --helpshort shows the runner's.)

from adapter_bert import export_model

if __name__ == "__main__":
    export_model.run()
