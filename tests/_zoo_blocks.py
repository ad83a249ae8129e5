"""Small hand-made equivalents of the vision and diffusion blocks whose data flow is not
series-parallel (issue 31): ReXNet's bottleneck, a DiT block, a dense block, a MobileOne
block and a BotNet block. Each keeps the real block's code shape (its variables, its
partial residual, its unpacking) at a size that traces in milliseconds."""

from __future__ import annotations

import torch
import torch.nn as nn


def conv_bn(c_in: int, c_out: int, k: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, k, padding=k // 2, bias=False), nn.BatchNorm2d(c_out))


class LinearBottleneck(nn.Module):
    """timm's ReXNet block: the shortcut is added to the first channels only."""

    def __init__(self, c_in: int = 4, c_out: int = 6) -> None:
        super().__init__()
        self.in_channels = c_in
        self.conv_exp = conv_bn(c_in, 12)
        self.conv_dw = conv_bn(12, 12, 3)
        self.act_dw = nn.ReLU6()
        self.conv_pwl = conv_bn(12, c_out)

    def forward(self, x):
        shortcut = x
        x = self.conv_exp(x)
        x = self.conv_dw(x)
        x = self.act_dw(x)
        x = self.conv_pwl(x)
        x = torch.cat([x[:, 0:self.in_channels] + shortcut, x[:, self.in_channels:]], dim=1)
        return x


class AdaNormZero(nn.Module):
    """diffusers' AdaLayerNormZero: one linear makes six modulation vectors."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.silu, self.linear = nn.SiLU(), nn.Linear(dim, 6 * dim)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)

    def forward(self, x, emb):
        emb = self.linear(self.silu(emb))
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = emb.chunk(6, dim=1)
        x = self.norm(x) * (1 + scale_msa[:, None]) + shift_msa[:, None]
        return x, gate_msa, shift_mlp, scale_mlp, gate_mlp


class DiTBlock(nn.Module):
    """diffusers' BasicTransformerBlock with ``norm_type="ada_norm_zero"`` (adaLN-Zero)."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.norm1 = AdaNormZero(dim)
        self.attn1 = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, hidden_states, emb):
        norm_hidden_states, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.norm1(hidden_states, emb)
        attn_output = self.attn1(norm_hidden_states, norm_hidden_states, norm_hidden_states, need_weights=False)[0]
        attn_output = gate_msa.unsqueeze(1) * attn_output
        hidden_states = attn_output + hidden_states
        norm_hidden_states = self.norm2(hidden_states)
        norm_hidden_states = norm_hidden_states * (1 + scale_mlp[:, None]) + shift_mlp[:, None]
        ff_output = self.ff(norm_hidden_states)
        ff_output = gate_mlp.unsqueeze(1) * ff_output
        hidden_states = ff_output + hidden_states
        return hidden_states


class DenseLayer(nn.Module):
    def __init__(self, c_in: int, growth: int) -> None:
        super().__init__()
        self.norm, self.relu, self.conv = nn.BatchNorm2d(c_in), nn.ReLU(), nn.Conv2d(c_in, growth, 3, padding=1)

    def forward(self, features):
        x = torch.cat(features, 1)
        return self.conv(self.relu(self.norm(x)))


class DenseBlock(nn.Module):
    """torchvision's and timm's DenseNet block: each layer reads every earlier one."""

    def __init__(self, c_in: int = 4, growth: int = 2, n: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(c_in + k * growth, growth) for k in range(n))

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            new = layer(features)
            features.append(new)
        return torch.cat(features, 1)


class MobileOneBlock(nn.Module):
    """timm's MobileOneBlock in its train-time form: BN identity, 1×1 scale and k×k branches."""

    def __init__(self, c: int = 4, branches: int = 2) -> None:
        super().__init__()
        self.identity = nn.BatchNorm2d(c)
        self.conv_scale = conv_bn(c, c)
        self.conv_kxk = nn.ModuleList(conv_bn(c, c, 3) for _ in range(branches))
        self.drop_path, self.attn, self.act = nn.Identity(), nn.Identity(), nn.ReLU()

    def forward(self, x):
        identity_out = self.identity(x)
        scale_out = self.conv_scale(x)
        out = scale_out
        for ck in self.conv_kxk:
            out += ck(x)
        out = self.drop_path(out)
        out += identity_out
        return self.act(self.attn(out))


class RelPosBias(nn.Module):
    def __init__(self, tokens: int) -> None:
        super().__init__()
        self.rel = nn.Parameter(torch.randn(tokens, tokens) * 0.02)

    def forward(self, q):
        return q.mean(-1, keepdim=True) * self.rel


class BottleneckAttn(nn.Module):
    """timm's BottleneckAttn (BotNet): q is read by ``q @ k`` and by the position bias."""

    def __init__(self, dim: int = 8, heads: int = 2, side: int = 4) -> None:
        super().__init__()
        self.heads, self.dim_head = heads, dim // heads
        self.qkv = nn.Conv2d(dim, 3 * dim, 1, bias=False)
        self.pos_embed = RelPosBias(side * side)
        self.scale = self.dim_head ** -0.5

    def forward(self, x):
        B, C, H, W = x.shape
        x = self.qkv(x)
        q, k, v = torch.split(x, [C, C, C], dim=1)
        q = q.reshape(B * self.heads, self.dim_head, -1).transpose(-1, -2)
        k = k.reshape(B * self.heads, self.dim_head, -1)
        v = v.reshape(B * self.heads, self.dim_head, -1).transpose(-1, -2)
        attn = (q @ k) * self.scale
        attn = attn + self.pos_embed(q)
        attn = attn.softmax(dim=-1)
        out = (attn @ v).transpose(-1, -2).reshape(B, C, H, W)
        return out


class BotBlock(nn.Module):
    """timm's byobnet BottleneckBlock with a self-attention middle (botnet26t)."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv1_1x1 = conv_bn(c, c)
        self.self_attn = BottleneckAttn(c)
        self.post_attn = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU())
        self.conv3_1x1 = conv_bn(c, c)
        self.shortcut = conv_bn(c, c)
        self.act = nn.ReLU()

    def forward(self, x):
        shortcut = x
        x = self.conv1_1x1(x)
        x = self.self_attn(x)
        x = self.post_attn(x)
        x = self.conv3_1x1(x)
        x = x + self.shortcut(shortcut)
        return self.act(x)


def blocks() -> dict[str, tuple[nn.Module, tuple]]:
    """Each block, eval mode, seeded, with its inputs."""
    torch.manual_seed(0)
    return {
        "rexnet": (LinearBottleneck().eval(), (torch.randn(1, 4, 6, 6),)),
        "dit": (DiTBlock().eval(), (torch.randn(2, 5, 8), torch.randn(2, 8))),
        "dense": (DenseBlock().eval(), (torch.randn(1, 4, 6, 6),)),
        "mobileone": (MobileOneBlock().eval(), (torch.randn(1, 4, 6, 6),)),
        "botnet": (BotBlock().eval(), (torch.randn(1, 8, 4, 4),)),
    }
