"""CUDA arrays (``__cuda_array_interface__``: torch, CuPy, numba) go to device
registration (``fabriclib_mr_register_device``) with their pointer and
device. With a GPU, real device memory from the driver API (no torch
needed) either registers and receives a write, checked byte for byte, or is
refused naming why (a provider without ``FI_HMEM``); never a crash, never
taken for host memory."""

import ctypes
import os

import pytest

from fabriclib import Engine, errors

PAGE = 4096


class CudaArray:
    """The smallest ``__cuda_array_interface__`` (v3) object: bytes at ``ptr``."""

    def __init__(self, ptr: int, n: int, strides=None, device=None):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": strides}
        if device is not None:
            self.__dlpack_device__ = lambda: (2, device)


def cuda():
    """The driver API with a current context on GPU 0, or None."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    dev, ctx = ctypes.c_int(0), ctypes.c_void_p()
    if cu.cuInit(0) or cu.cuDeviceGet(ctypes.byref(dev), 0):
        return None
    if cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) or cu.cuCtxSetCurrent(ctx):
        return None
    return cu


def test_a_cuda_array_is_registered_as_device_memory(engine_kw):
    host = ctypes.create_string_buffer(PAGE)
    with Engine(**engine_kw) as e:
        # Host memory behind a CUDA array: refused as device memory (no
        # driver: UNSUPPORTED; a driver: not device memory), never
        # registered as host memory.
        with pytest.raises((errors.Unsupported, errors.InvalidArgument)) as info:
            e.register(CudaArray(ctypes.addressof(host), PAGE, device=0))
        assert "CUDA" in info.value.message or "device" in info.value.message, info.value.message
        with pytest.raises(ValueError):
            e.register(CudaArray(ctypes.addressof(host), PAGE // 2, strides=(2,)))


@pytest.mark.skipif(cuda() is None, reason="needs an NVIDIA GPU and its driver")
def test_device_memory_receives_a_write_or_is_refused_with_the_reason(engine_kw):
    cu = cuda()
    ptr = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(PAGE)) == 0
    try:
        with Engine(**engine_kw) as e:
            try:
                dst = e.register(CudaArray(ptr.value, PAGE, device=0))
            except errors.Unsupported as x:  # the provider has no FI_HMEM: it says so
                assert e.provider.split(";")[0] in x.message or "HMEM" in x.message, x.message
                print(f"\ndevice memory on {e.provider}: refused: {x.message}")
                return
            data = os.urandom(PAGE)
            src = e.register(bytearray(data))
            e.write(src, dst.descriptor(), PAGE, timeout=10).wait(10)
            back = ctypes.create_string_buffer(PAGE)
            assert cu.cuMemcpyDtoH_v2(back, ptr, ctypes.c_size_t(PAGE)) == 0
            assert back.raw == data
            print(f"\ndevice memory on {e.provider}: registered, a write landed")
    finally:
        cu.cuMemFree_v2(ptr)
