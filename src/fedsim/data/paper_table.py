"""The FedProx/FedDANE paper's dataset table: devices, samples, and the mean and stdev of samples per device.

Its own module, with no imports, so that the workflow's cost estimate reads it without loading h5py.
"""

PAPER_TABLE = {
    "femnist": dict(devices=200, samples=18345, mean=92, stdev=159),
    "sent140": dict(devices=772, samples=40783, mean=53, stdev=32),
    "shakespeare": dict(devices=143, samples=517106, mean=3616, stdev=6808),
}
