"""Adaptations to libraries that users bring (Accelerate), where they lack a branch for ``neuron``."""
