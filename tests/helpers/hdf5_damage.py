"""Damage a dataset file behind HDF5's back, as a disk or a copy might."""

import h5py


def flip_byte(path, name, chunk=0):
    """Flip one byte in the middle of a stored chunk of array `name`, behind HDF5's back."""
    with h5py.File(path) as f:
        info = f[name].id.get_chunk_info(chunk)
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0x10]))
