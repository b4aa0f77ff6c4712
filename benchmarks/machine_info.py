"""What a results file says of the machine it was measured on (psutil only: the GPU machine runs it too).

"AMD EPYC" alone does not tell one CPU generation from the next, and a ratio between engines moves
with it (bf16 and int8 dot products are twice as wide on some cores), so the family, model number
and the instruction sets the engines pick kernels by are recorded too.
"""
from __future__ import annotations

import os
import platform

import psutil

# the flags the CPU engines choose their kernels by (bf16/int8 dot products, AMX tiles)
ENGINE_FLAGS = ("avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8", "amx_tile")


def cpuinfo() -> dict:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def machine() -> dict:
    info = cpuinfo()
    flags = set(info.get("flags", "").split())
    return {"cpus": os.cpu_count(), "cpu_model": info.get("model name", ""),
            "cpu_family": info.get("cpu family"), "cpu_model_number": info.get("model"),
            "cpu_flags": " ".join(f for f in ENGINE_FLAGS if f in flags),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform(), "load_avg": os.getloadavg()}
