"""Neuron Explorer for the simulated chip: ``neuron-explorer`` (``python -m torch_neuronx.explorer``)
over the profiles ``NeuronProfiler`` writes (docs/profiling.md#neuron-explorer)."""
