"""PyTorch twins of braid's built-in models, for benchmarks and checkpoint interchange.

Contract: each model's state_dict names, shapes and layouts are exactly those braid
writes to model.safetensors, so a braid checkpoint loads here with strict=True and back.
Sequential models number every layer (Flatten, activations, pooling, dropout included),
which is why the parameterised layers are 1, 3, 5 in the MLP. Images are NCHW
[B,1,28,28] here and NHWC in braid; with one channel both are the same bytes, and
Flatten emits (C,H,W) order in both. Keep this file and bench/README.md in step with
braid's model definitions: the lead builds braid's models to match them.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = ("mlp", "cnn", "cnn-bn", "resnet18", "gpt-tiny", "gpt-small")


def mlp():
    return nn.Sequential(
        nn.Flatten(),  # 0
        nn.Linear(784, 1024),  # 1
        nn.ReLU(),  # 2
        nn.Linear(1024, 1024),  # 3
        nn.ReLU(),  # 4
        nn.Linear(1024, 10),  # 5
    )


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3),  # 0: 28 -> 26
        nn.ReLU(),  # 1
        nn.MaxPool2d(2),  # 2: 26 -> 13
        nn.Conv2d(32, 64, 3),  # 3: 13 -> 11
        nn.ReLU(),  # 4
        nn.MaxPool2d(2),  # 5: 11 -> 5 (floor)
        nn.Flatten(),  # 6: 64*5*5 = 1600, (C,H,W) order
        nn.Linear(1600, 128),  # 7
        nn.ReLU(),  # 8
        nn.Linear(128, 10),  # 9
    )


def cnn_bn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3),  # 0
        nn.BatchNorm2d(32),  # 1 (eps 1e-5, momentum 0.1)
        nn.ReLU(),  # 2
        nn.MaxPool2d(2),  # 3
        nn.Conv2d(32, 64, 3),  # 4
        nn.BatchNorm2d(64),  # 5
        nn.ReLU(),  # 6
        nn.MaxPool2d(2),  # 7
        nn.Flatten(),  # 8
        nn.Linear(1600, 128),  # 9
        nn.ReLU(),  # 10
        nn.Dropout(0.25),  # 11
        nn.Linear(128, 10),  # 12
    )


class Residual(nn.Module):
    """braid's residual block: body(x) + shortcut(x), or + x without a shortcut; its
    parameters named "body." and "shortcut." as braid names them."""

    def __init__(self, body, shortcut=None):
        super().__init__()
        self.body = body
        if shortcut is not None:
            self.shortcut = shortcut
        self.has_shortcut = shortcut is not None

    def forward(self, x):
        return self.body(x) + (self.shortcut(x) if self.has_shortcut else x)


class GlobalAvgPool(nn.Module):
    """braid's global_avgpool: the mean over height and width, [B, C] out (one layer, as
    braid numbers it, where PyTorch would use AdaptiveAvgPool2d and Flatten)."""

    def forward(self, x):
        return x.mean(dim=(2, 3))


def resnet18():
    """braid's resnet18 (src/braid/train/model_spec.cpp): ResNet-18 with the CIFAR stem on
    Fashion-MNIST padded to 32 x 32; a strided block's shortcut a 1x1 convolution and batch
    norm. 11,172,810 parameters. Layer 0 pads, as braid's pad2d."""

    def block(cin, cout, stride):
        body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        shortcut = None
        if stride != 1:
            shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                     nn.BatchNorm2d(cout))
        return Residual(body, shortcut)

    layers = [nn.ZeroPad2d(2), nn.Conv2d(1, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64),
              nn.ReLU()]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [block(cin, cout, stride), nn.ReLU(), block(cout, cout, 1), nn.ReLU()]
        cin = cout
    layers += [GlobalAvgPool(), nn.Linear(512, 10)]
    return nn.Sequential(*layers)


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_head, context):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        # Not persistent: braid's checkpoint has no mask tensor, so neither may the state_dict.
        mask = torch.tril(torch.ones(context, context, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, context, context), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)  # nanoGPT order: q, k, v along the feature axis
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)  # [B, nh, T, hd]
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, d_model, n_head, context):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)  # eps 1e-5
        self.attn = CausalSelfAttention(d_model, n_head, context)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Byte-level GPT; the LM head is tied to wte (logits = h @ wte.weight^T, no bias)."""

    def __init__(self, vocab=256, context=128, d_model=128, n_head=4, n_layer=4):
        super().__init__()
        self.context = context
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(context, d_model)
        self.h = nn.ModuleList([Block(d_model, n_head, context) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self._init_gpt2(n_layer)

    def _init_gpt2(self, n_layer):
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        # Residual projections are scaled down so the residual stream's variance does not
        # grow with depth (GPT-2); both attn.c_proj and mlp.c_proj.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx):
        """idx: int64 [B, T] with T <= context; returns logits [B, T, vocab]."""
        B, T = idx.shape
        if T > self.context:
            raise ValueError(f"GPT: sequence length {T} exceeds the context {self.context}")
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def gpt_small():
    """braid's gpt-small (src/braid/train/model_spec.cpp): gpt-tiny's shape at d_model 512,
    8 heads, 8 blocks; 25.4M parameters."""
    return GPT(d_model=512, n_head=8, n_layer=8)


def build_model(name):
    """Returns a fresh model for one of MODELS (PyTorch default init for image models)."""
    builders = {"mlp": mlp, "cnn": cnn, "cnn-bn": cnn_bn, "resnet18": resnet18, "gpt-tiny": GPT,
                "gpt-small": gpt_small}
    if name not in builders:
        raise ValueError(f"unknown model '{name}'; choose one of {', '.join(MODELS)}")
    return builders[name]()


def is_language_model(name):
    return name in ("gpt-tiny", "gpt-small")


if __name__ == "__main__":  # python3 bench/models.py: print every model's state_dict layout
    for n in MODELS:
        m = build_model(n)
        sd = m.state_dict()
        total = sum(t.numel() for k, t in sd.items() if k.endswith(("weight", "bias")))
        print(f"== {n}: {len(sd)} tensors, {total} parameters")
        for k, t in sd.items():
            print(f"  {k:28s} {str(t.dtype).replace('torch.', ''):8s} {list(t.shape)}")
