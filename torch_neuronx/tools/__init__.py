"""Command-line tools over the simulated machine: ``neuron-ls`` (the devices and their use) and
``neuron-top`` (a live view of the processes using them). See docs/device-tools.md."""
