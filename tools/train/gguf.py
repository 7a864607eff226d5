"""gguf.py - a small GGUF v3 writer and reader (numpy only).

Part of the attnd default-model pipeline (see tools/train/README.md).

Layout written (GGUF spec, little endian):
  "GGUF" | u32 version=3 | u64 tensor_count | u64 kv_count
  kv_count x  (string key, u32 value_type, value)
  tensor_count x (string name, u32 n_dims, u64 dims[n_dims] (dims[0] fastest), u32 type,
                  u64 offset relative to the data section)
  zero padding to general.alignment, then the tensor data, each tensor at an aligned offset.
  string = u64 byte length + UTF-8 bytes (no terminator).
"""
import struct

import numpy as np

# value types
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
# tensor types
F32, F16, Q8_0 = 0, 1, 8

_SCALAR = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
           FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}
_NP = {UINT8: np.uint8, INT8: np.int8, UINT16: np.uint16, INT16: np.int16, UINT32: np.uint32,
       INT32: np.int32, FLOAT32: np.float32, UINT64: np.uint64, INT64: np.int64, FLOAT64: np.float64}


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, v):
    if vtype == STRING:
        return _str(v)
    if vtype == ARRAY:
        etype, items = v
        out = struct.pack("<IQ", etype, len(items))
        if etype == STRING:
            return out + b"".join(_str(s) for s in items)
        if etype == BOOL:
            return out + bytes(1 if x else 0 for x in items)
        return out + np.asarray(items, dtype=_NP[etype]).astype("<" + np.dtype(_NP[etype]).str[1:]).tobytes()
    return struct.pack(_SCALAR[vtype], v)


def quantize_q8_0(a):
    """a: float32 array whose last dim is a multiple of 32 -> bytes of Q8_0 blocks
    (per block of 32: f16 scale d = max|x|/127, then 32 int8 round(x/d))."""
    x = a.astype(np.float32).reshape(-1, 32)
    amax = np.abs(x).max(axis=1)
    d = amax / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0)
    q = np.rint(x * inv[:, None]).clip(-127, 127).astype(np.int8)
    blocks = np.empty(x.shape[0], dtype=[("d", "<f2"), ("q", "i1", 32)])
    blocks["d"] = d.astype(np.float16)
    blocks["q"] = q
    return blocks.tobytes()


def dequantize_q8_0(raw, n):
    blocks = np.frombuffer(raw, dtype=[("d", "<f2"), ("q", "i1", 32)], count=n // 32)
    return (blocks["d"].astype(np.float32)[:, None] * blocks["q"].astype(np.float32)).reshape(-1)


class Writer:
    def __init__(self, alignment=32):
        self.alignment = alignment
        self.kvs = []        # (key, vtype, value)
        self.tensors = []    # (name, dims, ttype, bytes)

    def add(self, key, vtype, value):
        self.kvs.append((key, vtype, value))

    def add_tensor(self, name, array, ttype):
        """array: numpy array in torch/C order (shape [..., row]); GGUF dims are reversed."""
        a = np.ascontiguousarray(array, dtype=np.float32)
        dims = list(reversed(a.shape))
        if ttype == F32:
            data = a.astype("<f4").tobytes()
        elif ttype == F16:
            data = a.astype("<f2").tobytes()
        elif ttype == Q8_0:
            assert dims[0] % 32 == 0, name
            data = quantize_q8_0(a)
        else:
            raise ValueError(ttype)
        self.tensors.append((name, dims, ttype, data))

    def write(self, path):
        al = self.alignment
        head = bytearray(b"GGUF")
        head += struct.pack("<IQQ", 3, len(self.tensors), len(self.kvs))
        for key, vtype, value in self.kvs:
            head += _str(key) + struct.pack("<I", vtype) + _value(vtype, value)
        offset = 0
        offsets = []
        for name, dims, ttype, data in self.tensors:
            offset = (offset + al - 1) // al * al
            offsets.append(offset)
            head += _str(name) + struct.pack("<I", len(dims))
            head += b"".join(struct.pack("<Q", d) for d in dims)
            head += struct.pack("<IQ", ttype, offset)
            offset += len(data)
        head += b"\0" * ((-len(head)) % al)
        with open(path, "wb") as f:
            f.write(head)
            pos = 0
            for (name, dims, ttype, data), off in zip(self.tensors, offsets):
                f.write(b"\0" * (off - pos))
                f.write(data)
                pos = off + len(data)


def read(path):
    """Returns (kv dict, tensors dict name -> float32 numpy array in torch order)."""
    buf = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def rstr():
        nonlocal pos
        n = take("<Q")
        s = buf[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def rval(t):
        nonlocal pos
        if t == STRING:
            return rstr()
        if t == ARRAY:
            et, n = take("<I"), take("<Q")
            if et == STRING:
                return [rstr() for _ in range(n)]
            if et == BOOL:
                v = [b != 0 for b in buf[pos:pos + n]]
                pos += n
                return v
            dt = np.dtype(_NP[et]).newbyteorder("<")
            v = np.frombuffer(buf, dtype=dt, count=n, offset=pos)
            pos += n * dt.itemsize
            return v
        return take(_SCALAR[t])

    assert buf[:4] == b"GGUF"
    pos = 4
    version, nt, nkv = take("<I"), take("<Q"), take("<Q")
    assert version == 3
    kv = {}
    for _ in range(nkv):
        k = rstr()
        kv[k] = rval(take("<I"))
    infos = []
    for _ in range(nt):
        name = rstr()
        nd = take("<I")
        dims = [take("<Q") for _ in range(nd)]
        infos.append((name, dims, take("<I"), take("<Q")))
    al = kv.get("general.alignment", 32)
    base = (pos + al - 1) // al * al
    tensors = {}
    for name, dims, ttype, off in infos:
        n = int(np.prod(dims))
        start = base + off
        if ttype == F32:
            a = np.frombuffer(buf, dtype="<f4", count=n, offset=start).astype(np.float32)
        elif ttype == F16:
            a = np.frombuffer(buf, dtype="<f2", count=n, offset=start).astype(np.float32)
        elif ttype == Q8_0:
            a = dequantize_q8_0(buf[start:start + n // 32 * 34], n)
        else:
            raise ValueError(f"{name}: tensor type {ttype}")
        tensors[name] = a.reshape(list(reversed(dims)))
    return kv, tensors
