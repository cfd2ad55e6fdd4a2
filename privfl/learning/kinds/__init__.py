"""The GLM kinds, one object each over the shared maths (as Flower writes one Strategy per
algorithm over ``aggregate.py``): each owns its encoding, residual, loss and flipback."""
