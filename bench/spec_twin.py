"""PyTorch twins of braid JSON model specs (issue 32), for checkpoint interchange.

build_from_spec(spec) takes what `braid train --model FILE.json` takes ({"input": [H, W, C],
"layers": [...]} or "nodes": [...], src/braid/train/model_spec.h) and returns a torch.nn.Module whose
state_dict names, shapes and dtypes are braid's, so RUN/checkpoint/model.safetensors loads
with load_state_dict(strict=True) and evaluates as braid does. The conventions are those of
bench/models.py's hand-written twins:

- Layers are numbered as braid numbers them: every layer of a list gets an index, whether
  or not it has tensors ("1.weight"); a residual block's layers are "<i>.body.<j>." and its
  shortcut's "<i>.shortcut.<j>.", nested blocks likewise. Conv weights are
  [out, in/groups, k, k], Linear weights [out, in], batch norm has running_mean,
  running_var (f32) and num_batches_tracked (i64, rank 0).
- Layout: braid's images are NHWC, this twin's are NCHW, PyTorch's own. A spec whose input
  is [H, W, C] therefore takes x [N, C, H, W] here (Fashion-MNIST: [N, 1, 28, 28], the same
  bytes as braid's [N, 28, 28, 1]); any other input is [N, *input] in both. Every layer on
  an image keeps NCHW; where "the last dimension" means channels in braid (layernorm), the
  twin says so explicitly. Flatten of an image emits (C, H, W) order in both (braid
  transposes, nn/flatten.h), so the Linear after it is interchangeable.
- Eval semantics: dropout is the identity and batch norm uses its running statistics, as
  in `braid eval`; call .eval() before comparing.

- A graph spec ({"input": ..., "nodes": [...], "output": NAME}) becomes a GraphTwin: each
  layer node is a submodule under the node's name ("stem.weight", "block.body.0.weight"),
  "add" sums its inputs and "concat" joins them along braid's sample axis, which for an
  image ([H, W, C], default axis -1: channels) is NCHW's dim 1 here (H is dim 2, W dim 3).

What braid accepts but a twin does not reproduce raises ValueError naming the layer, as
do specs braid itself refuses (unknown types or keys, shapes a layer cannot take).

  /usr/bin/python3 bench/spec_twin.py bench/twin_specs/conv.json   # prints the state_dict
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import CausalSelfAttention, GlobalAvgPool, Residual  # noqa: E402

MAX_SIZE = (1 << 31) - 1

# The keys braid reads for each layer type besides "type" (model_spec.cpp, make_layer).
KEYS = {
    "linear": {"in_features", "out_features", "bias"},
    "conv2d": {"in_channels", "out_channels", "kernel", "stride", "padding", "dilation", "groups",
               "bias"},
    "maxpool2d": {"kernel"},
    "avgpool2d": {"kernel"},
    "upsample": {"scale_factor"},
    "global_avgpool": set(),
    "batchnorm": {"num_features"},
    "layernorm": {"normalized_shape"},
    "relu": set(),
    "tanh": set(),
    "sigmoid": set(),
    "leaky_relu": {"negative_slope"},
    "silu": set(),
    "softmax": set(),
    "gelu": {"approximate"},
    "dropout": {"p"},
    "flatten": set(),
    "embedding": {"num_embeddings", "embedding_dim"},
    "attention": {"heads"},
    "residual": {"layers", "shortcut"},
    "pad2d": {"padding"},
}


class ChannelsLastLayerNorm(nn.LayerNorm):
    """braid's layernorm on an image: braid normalises the last dimension of NHWC, i.e.
    each pixel's C channels; nn.LayerNorm(C) on NCHW would normalise along the width. The
    same weight [C] and bias [C], applied over dim 1 of NCHW."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class NearestUpsample(nn.Module):
    """braid's upsample: each pixel repeated s x s (y[oy, ox] = x[oy // s, ox // s], integer
    arithmetic, nn/upsample.h). nn.Upsample(scale_factor=s, mode="nearest") means the same
    but indexes in float arithmetic, floor(o * (1/s)), which for some factors lands on the
    previous pixel at a block's edge (torch 1.13, s = 41: output column 41 reads input
    column 0; also 47, 55, 61, 82, ...); repeating is exact for every s."""

    def __init__(self, scale_factor):
        super().__init__()
        self.scale_factor = scale_factor

    def forward(self, x):
        s = self.scale_factor
        return x.repeat_interleave(s, dim=2).repeat_interleave(s, dim=3)

    def extra_repr(self):
        return f"scale_factor={self.scale_factor}"


class SpecError(ValueError):
    pass


class _Reader:
    """The typed reads of one layer's keys, with braid's checks (LayerReader)."""

    def __init__(self, layer, where):
        self.j = layer
        self.where = where

    def fail(self, msg):
        raise SpecError(f"model: {self.where}: {msg}")

    def integer(self, key, default=None, lo=1, hi=MAX_SIZE):
        if key not in self.j:
            if default is None:
                raise SpecError(f"model: {self.where} needs '{key}'")
            return default
        v = self.j[key]
        integral = (isinstance(v, int) and not isinstance(v, bool)) or (
            isinstance(v, float) and math.isfinite(v) and v == math.trunc(v))
        if not integral or not lo <= v <= hi:
            self.fail(f"'{key}' must be an integer in [{lo}, {hi}], got {json.dumps(v)}")
        return int(v)

    def number(self, key, default):
        v = self.j.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(f"'{key}' must be a number")
        return float(v)

    def flag(self, key, default):
        v = self.j.get(key, default)
        if not isinstance(v, bool):
            self.fail(f"'{key}' must be true or false")
        return v

    def text(self, key, default):
        v = self.j.get(key, default)
        if not isinstance(v, str):
            self.fail(f"'{key}' must be a string")
        return v


def _expect_rank(r, shape, ranks, layout):
    # shape is one sample's, without the batch: braid's rank is len(shape) + 1.
    if len(shape) + 1 not in ranks:
        r.fail(f"expects input {layout}, got {[None] + list(shape)} (braid refuses it too)")


IMAGE = "[batch, height, width, channels]"


def _conv_out(n, k, stride, padding, dilation):
    return (n + 2 * padding - (dilation * (k - 1) + 1)) // stride + 1


def _make_layer(t, r, layer, shape, path):
    """Returns (module, output shape). `shape` is braid's per-sample shape: (H, W, C) for an
    image, whose twin tensor is NCHW."""
    image = len(shape) == 3
    if t == "linear":
        _expect_rank(r, shape, (2, 3), "[batch, features] or [batch, time, features]")
        fin = r.integer("in_features", shape[-1])
        fout = r.integer("out_features")
        bias = r.flag("bias", True)
        if fin != shape[-1]:
            r.fail(f"in_features {fin} but the input ends in {shape[-1]}")
        return nn.Linear(fin, fout, bias=bias), shape[:-1] + (fout,)
    if t == "conv2d":
        _expect_rank(r, shape, (4,), IMAGE)
        h, w, c = shape
        cin = r.integer("in_channels", c)
        cout = r.integer("out_channels")
        k = r.integer("kernel")
        stride = r.integer("stride", 1)
        padding = r.integer("padding", 0, lo=0)
        dilation = r.integer("dilation", 1)
        groups = r.integer("groups", 1)
        bias = r.flag("bias", True)
        if cin != c:
            r.fail(f"in_channels {cin} but the input has {c} channels")
        if cin % groups or cout % groups:
            r.fail(f"'groups' ({groups}) must divide both in_channels ({cin}) and "
                   f"out_channels ({cout})")
        span = dilation * (k - 1) + 1
        if h + 2 * padding < span or w + 2 * padding < span:
            r.fail(f"the {k}x{k} kernel (span {span}) is larger than the padded input "
                   f"{h + 2 * padding}x{w + 2 * padding}")
        # Zero padding on both sides, square kernel, equal stride and dilation on both axes:
        # nn.Conv2d's defaults (padding_mode "zeros"), on NCHW.
        m = nn.Conv2d(cin, cout, k, stride=stride, padding=padding, dilation=dilation,
                      groups=groups, bias=bias)
        return m, (_conv_out(h, k, stride, padding, dilation),
                   _conv_out(w, k, stride, padding, dilation), cout)
    if t in ("maxpool2d", "avgpool2d"):
        _expect_rank(r, shape, (4,), IMAGE)
        k = r.integer("kernel")
        h, w, c = shape
        if h < k or w < k:
            r.fail(f"input {h}x{w} is smaller than the {k}x{k} window")
        # Stride = kernel, no padding, floor output size in both. (braid runs a ReLU
        # followed by a max pool as pool-then-ReLU: the same numbers, no tensors, so the
        # numbering is unaffected.) No padding, so count_include_pad does not matter.
        m = nn.MaxPool2d(k) if t == "maxpool2d" else nn.AvgPool2d(k)
        return m, ((h - k) // k + 1, (w - k) // k + 1, c)
    if t == "upsample":
        _expect_rank(r, shape, (4,), IMAGE)
        s = r.integer("scale_factor")
        h, w, c = shape
        return NearestUpsample(s), (h * s, w * s, c)
    if t == "global_avgpool":
        _expect_rank(r, shape, (4,), IMAGE)
        return GlobalAvgPool(), (shape[2],)
    if t == "batchnorm":
        _expect_rank(r, shape, (2, 4), "[batch, features] or [batch, height, width, channels]")
        c = r.integer("num_features", shape[-1])
        if c != shape[-1]:
            r.fail(f"num_features {c} but the input has {shape[-1]} channels")
        # eps 1e-5, momentum 0.1, unbiased running variance: PyTorch's defaults. Over the
        # channels, which are dim 1 of NCHW here and the last dimension of NHWC in braid.
        return (nn.BatchNorm2d(c) if image else nn.BatchNorm1d(c)), shape
    if t == "layernorm":
        n = r.integer("normalized_shape", shape[-1])
        if n != shape[-1]:
            r.fail(f"normalized_shape {n} but the input ends in {shape[-1]}")
        # Over braid's last dimension: an image's channels (see ChannelsLastLayerNorm).
        return (ChannelsLastLayerNorm(n) if image else nn.LayerNorm(n)), shape
    if t == "relu":
        return nn.ReLU(), shape
    if t == "tanh":
        return nn.Tanh(), shape
    if t == "sigmoid":
        return nn.Sigmoid(), shape
    if t == "silu":
        return nn.SiLU(), shape
    if t == "leaky_relu":
        slope = r.number("negative_slope", 0.01)
        if not math.isfinite(slope) or slope < 0:
            r.fail(f"'negative_slope' must be a finite number >= 0, got {slope}")
        # braid keeps the slope as a float32 (nn::LeakyReLU(float)); use the same value.
        return nn.LeakyReLU(float(np.float32(slope))), shape
    if t == "softmax":
        # Over the last dimension; braid refuses it on images (channels in NHWC, width in
        # NCHW), and so does the twin.
        _expect_rank(r, shape, (2, 3), "[batch, features] or [batch, time, features]")
        return nn.Softmax(dim=-1), shape
    if t == "gelu":
        approx = r.text("approximate", "none")
        if approx not in ("none", "tanh"):
            r.fail(f"'approximate' is 'none' or 'tanh', got '{approx}'")
        return nn.GELU(approximate=approx), shape
    if t == "dropout":
        p = r.number("p", 0.5)
        if not 0 <= p < 1:
            r.fail(f"'p' must be in [0, 1), got {p}")
        # Inverted dropout in both; braid's mask comes from its own RNG, so only eval
        # (the identity) is twinned.
        return nn.Dropout(p), shape
    if t == "flatten":
        if not 2 <= len(shape) + 1 <= 4:
            r.fail(f"Flatten takes rank 2 to 4, got {[None] + list(shape)}")
        # braid flattens NHWC in (C, H, W) order, nn.Flatten flattens NCHW in the same order.
        return nn.Flatten(), (int(np.prod(shape)),)
    if t == "embedding":
        n = r.integer("num_embeddings")
        d = r.integer("embedding_dim")
        if image:
            # braid would look up [B, H, W, C] ids into [B, H, W, C, D]; this twin's NCHW ids
            # would come out in another order.
            r.fail("an embedding of image-shaped ids cannot be twinned (NHWC vs NCHW)")
        # Takes integer ids ([N, *input], input_dtype i32 in braid; int64 here).
        return nn.Embedding(n, d), shape + (d,)
    if t == "attention":
        _expect_rank(r, shape, (3,), "[batch, time, features]")
        heads = r.integer("heads")
        tlen, d = shape
        if d % heads:
            r.fail(f"heads ({heads}) must divide the width {d}")
        # braid's CausalSelfAttention is the gpt twin's (nanoGPT): c_attn [q|k|v], c_proj;
        # the causal mask is sized for this layer's time steps, not a state_dict entry.
        return CausalSelfAttention(d, heads, tlen), shape
    if t == "pad2d":
        _expect_rank(r, shape, (4,), IMAGE)
        p = r.integer("padding", 1, lo=0)
        h, w, c = shape
        return nn.ZeroPad2d(p), (h + 2 * p, w + 2 * p, c)
    if t == "residual":
        if "layers" not in layer:
            raise SpecError(f"model: {r.where} needs 'layers'")
        body, out = _build_layers(layer["layers"], shape, r.where + " > ")
        shortcut = None
        side = shape
        if "shortcut" in layer:
            shortcut, side = _build_layers(layer["shortcut"], shape, r.where + " > shortcut > ")
        if tuple(out) != tuple(side):
            r.fail(f"the body outputs {list(out)} but the "
                   f"{'shortcut' if shortcut is not None else 'input'} is {list(side)}")
        return Residual(body, shortcut), out
    raise SpecError(f"model: {r.where}: unknown layer type '{t}'; braid accepts: "
                    + ", ".join(KEYS))


def _build_layers(layers, shape, path):
    if not isinstance(layers, list) or not layers:
        raise SpecError(f"model: '{path or 'layers'}' must be a non-empty list of layers")
    mods = []
    for i, layer in enumerate(layers):
        where0 = f"{path}layer {i}"
        if not isinstance(layer, dict) or not isinstance(layer.get("type"), str):
            raise SpecError(f"model: {where0} must be an object with a string 'type'")
        t = layer["type"]
        r = _Reader(layer, f"{where0} ({t})")
        if t in KEYS:
            for k in layer:
                if k != "type" and k not in KEYS[t]:
                    r.fail(f"unknown key '{k}'")
        m, shape = _make_layer(t, r, layer, tuple(shape), path)
        shape = tuple(int(d) for d in shape)
        if any(d < 1 for d in shape):
            r.fail(f"outputs the empty shape {list(shape)}")
        mods.append(m)
    return nn.Sequential(*mods), shape


class GraphTwin(nn.Module):
    """braid's nn::Graph: nodes run in their listed order, each reading the input or
    earlier nodes by name. Layer nodes are submodules named as the nodes, so the
    state_dict is braid's ("<node>.<param>"); add and concat have no tensors."""

    def __init__(self, nodes, output):
        super().__init__()
        self.plan = []  # (name, op, inputs, torch dim for concat)
        for name, op, inputs, dim, module in nodes:
            if module is not None:
                self.add_module(name, module)
            self.plan.append((name, op, inputs, dim))
        self.output = output

    def forward(self, x):
        values = {"input": x}
        for name, op, inputs, dim in self.plan:
            xs = [values[i] for i in inputs]
            if op == "add":
                y = xs[0]
                for t in xs[1:]:
                    y = y + t
            elif op == "concat":
                y = torch.cat(xs, dim=dim)
            else:
                y = getattr(self, name)(xs[0])
            values[name] = y
        return values[self.output]


def _torch_dim(axis, shape):
    """braid's sample axis (normalised) of a sample of `shape` -> the twin tensor's dim."""
    if len(shape) == 3:  # an image: braid's (H, W, C) are NCHW's dims 2, 3, 1
        return (2, 3, 1)[axis]
    return axis + 1


def _build_graph(nodes, output, in_shape):
    if not isinstance(nodes, list) or not nodes:
        raise SpecError("model: 'nodes' must be a non-empty list")
    names = []
    for i, n in enumerate(nodes):
        if (not isinstance(n, dict) or not isinstance(n.get("name"), str)
                or not isinstance(n.get("type"), str)):
            raise SpecError(f"model: node {i} must be an object with a string 'name' and a "
                            "string 'type'")
        name = n["name"]
        if not name or name == "input" or not all(ch.isalnum() or ch == "_" for ch in name):
            raise SpecError(f"model: node {i}: name '{name}' must be letters, digits and '_', "
                            "and not 'input'")
        if name in names:
            raise SpecError(f"model: node {i}: name '{name}' is taken by an earlier node")
        names.append(name)
    shapes = {"input": tuple(in_shape)}
    built, readers, previous = [], {}, "input"
    for i, n in enumerate(nodes):
        name, t = n["name"], n["type"]
        where = f"node '{name}' ({t})"
        inputs = n.get("inputs", [previous])
        if not isinstance(inputs, list) or not inputs:
            raise SpecError(f"model: {where}: 'inputs' must be a non-empty list of names")
        for k in inputs:
            if k not in shapes:
                later = k in names[i:]
                raise SpecError(f"model: {where} reads '{k}', which is "
                                + ("not listed before it" if later else "no node"))
            readers[k] = readers.get(k, 0) + 1
        ins = [shapes[k] for k in inputs]
        r = _Reader(n, where)
        dim = None
        if t in ("add", "concat"):
            for k in n:
                if k not in ("name", "type", "inputs") and not (k == "axis" and t == "concat"):
                    r.fail(f"unknown key '{k}'")
            if len(ins) < 2:
                r.fail(f"needs at least 2 'inputs', got {len(ins)}")
            module = None
            if t == "add":
                if any(s != ins[0] for s in ins):
                    r.fail(f"adds inputs of one shape, got {[list(s) for s in ins]}")
                shape = ins[0]
            else:
                rank = len(ins[0])
                axis = n.get("axis", -1)
                if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
                    r.fail(f"'axis' must be an integer in [{-rank}, {rank - 1}], got {axis}")
                axis %= rank
                if any(len(s) != rank or any(a != b for d, (a, b) in enumerate(zip(s, ins[0]))
                                             if d != axis) for s in ins):
                    r.fail(f"inputs must agree except along axis {axis}, got "
                           f"{[list(s) for s in ins]}")
                shape = tuple(sum(s[d] for s in ins) if d == axis else ins[0][d]
                              for d in range(rank))
                dim = _torch_dim(axis, ins[0])
        else:
            if len(ins) != 1:
                r.fail(f"is a layer and reads one input, got {len(ins)}")
            if t in KEYS:
                for k in n:
                    if k not in ("type", "name", "inputs") and k not in KEYS[t]:
                        r.fail(f"unknown key '{k}'")
            module, shape = _make_layer(t, r, n, ins[0], "")
            shape = tuple(int(d) for d in shape)
        built.append((name, t, inputs, dim, module))
        shapes[name] = shape
        previous = name
    output = names[-1] if output is None else output
    if output not in names:
        raise SpecError(f"model: 'output' names '{output}', which is no node")
    for name, t in ((n["name"], n["type"]) for n in nodes):
        if name != output and not readers.get(name):
            raise SpecError(f"model: node '{name}' ({t}) is not used: no node reads it and it "
                            f"is not the 'output' ({output})")
    return GraphTwin(built, output), shapes[output]


def build_from_spec(spec):
    """The PyTorch twin of a braid model spec (a dict, or a JSON file's path). The module
    gets `braid_input` (one sample's shape in braid's layout) and `braid_output` (the
    logits' shape per sample) as attributes; for an image input [H, W, C] it takes NCHW."""
    if isinstance(spec, str):
        if spec in ("mlp", "cnn", "cnn-bn", "resnet18", "gpt-tiny", "gpt-small"):
            raise SpecError(f"'{spec}' is a built-in model: use models.build_model('{spec}')")
        with open(spec) as f:
            spec = json.load(f)
    graph = isinstance(spec, dict) and "nodes" in spec
    if not isinstance(spec, dict) or "input" not in spec or ("layers" in spec) == graph:
        raise SpecError("model: a model spec is an object with 'input' (sample shape) and "
                        "either 'layers' (a chain) or 'nodes' (a graph)")
    accepted = ("input", "input_dtype") + (("nodes", "output") if graph else ("layers",))
    for k in spec:
        if k not in accepted:
            raise SpecError(f"model: unknown key '{k}'; accepted: {', '.join(sorted(accepted))}")
    dims = spec["input"]
    if (not isinstance(dims, list) or not 1 <= len(dims) <= 4
            or any(isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= MAX_SIZE
                   for d in dims)):
        raise SpecError(f"model: 'input' must be a list of 1 to 4 integers, got {dims}")
    dtype = spec.get("input_dtype", "f32")
    if dtype not in ("f32", "i32"):
        raise SpecError(f"model: 'input_dtype' is f32 or i32, got '{dtype}'")
    if len(dims) == 4:
        raise SpecError("model: a 4-dimensional sample ([B, ...] of rank 5) has no twin layout")
    if graph:
        model, out = _build_graph(spec["nodes"], spec.get("output"), tuple(dims))
    else:
        model, out = _build_layers(spec["layers"], tuple(dims), "")
    if len(out) not in (1, 2):
        raise SpecError(f"model: the last layer outputs {[None] + list(out)}; a model ends in "
                        "[batch, classes] or [batch, time, classes]")
    model.braid_input = tuple(dims)
    model.braid_output = tuple(out)
    model.braid_input_dtype = dtype
    return model


def to_twin_layout(x):
    """braid's batch of images [N, H, W, C] -> the twin's [N, C, H, W]."""
    return x.permute(0, 3, 1, 2).contiguous() if x.dim() == 4 else x


if __name__ == "__main__":
    for path in sys.argv[1:]:
        m = build_from_spec(path)
        sd = m.state_dict()
        total = sum(p.numel() for p in m.parameters())
        print(f"== {path}: input {list(m.braid_input)} -> {list(m.braid_output)}, {len(sd)} "
              f"tensors, {total} parameters")
        for k, t in sd.items():
            print(f"  {k:28s} {str(t.dtype).replace('torch.', ''):8s} {list(t.shape)}")
