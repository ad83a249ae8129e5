"""Small real models whose tree a person would draw by hand (tests/test_tree_goldens.py)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

Built = tuple[nn.Module, tuple[Any, ...], dict[str, Any]]


def llama() -> Built:
    import transformers

    config = transformers.AutoConfig.for_model(
        "llama",
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
    )
    return transformers.AutoModelForCausalLM.from_config(config).eval(), (torch.randint(0, 100, (1, 8)),), {}


def t5() -> Built:
    import transformers

    config = transformers.AutoConfig.for_model(
        "t5", num_layers=2, num_decoder_layers=2, d_model=32, d_ff=64, d_kv=8, num_heads=4, vocab_size=100
    )
    inputs = {"input_ids": torch.randint(0, 100, (1, 8)), "decoder_input_ids": torch.randint(0, 100, (1, 5))}
    return transformers.T5Model(config).eval(), (), inputs


def whisper() -> Built:
    import transformers

    config = transformers.AutoConfig.for_model(
        "whisper",
        encoder_layers=2,
        decoder_layers=2,
        d_model=32,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        vocab_size=100,
        num_mel_bins=16,
        max_source_positions=16,
        max_target_positions=16,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    inputs = {"input_features": torch.randn(1, 16, 32), "decoder_input_ids": torch.randint(0, 100, (1, 5))}
    return transformers.WhisperModel(config).eval(), (), inputs


class DoubleConv(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class UNet(nn.Module):
    """Two levels down and up, joined by ``cat`` skips."""

    def __init__(self) -> None:
        super().__init__()
        self.enc1, self.enc2, self.pool, self.mid = (
            DoubleConv(3, 8),
            DoubleConv(8, 16),
            nn.MaxPool2d(2),
            DoubleConv(16, 32),
        )
        self.up2, self.dec2 = nn.ConvTranspose2d(32, 16, 2, stride=2), DoubleConv(32, 16)
        self.up1, self.dec1 = nn.ConvTranspose2d(16, 8, 2, stride=2), DoubleConv(16, 8)
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        m = self.mid(self.pool(e2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
        return self.head(d1)


def unet() -> Built:
    return UNet(), (torch.randn(1, 3, 16, 16),), {}


class Bottleneck(nn.Module):
    """torchvision's ResNet bottleneck block, without a downsample."""

    def __init__(self, channels: int = 16, width: int = 4) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(channels, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, channels, 1, bias=False), nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out = out + identity
        return self.relu(out)


def bottleneck() -> Built:
    return Bottleneck().eval(), (torch.randn(1, 16, 8, 8),), {}


class RMSNorm(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def rmsnorm() -> Built:
    return RMSNorm(), (torch.randn(2, 8),), {}


class GRUClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.gru, self.head = nn.Embedding(50, 16), nn.GRU(16, 32, batch_first=True), nn.Linear(32, 5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.emb(tokens))
        return self.head(out[:, -1])


def gru() -> Built:
    return GRUClassifier(), (torch.randint(0, 50, (2, 7)),), {}


class HeadAndHidden(nn.Module):
    """Returns the head's output and the hidden state it read."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.body(x))
        return self.head(h), h


def head_and_hidden() -> Built:
    return HeadAndHidden(), (torch.randn(2, 8),), {}


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def mlp() -> Built:
    return MLP(), (torch.randn(3, 4),), {}


class LSTMHead(nn.Module):
    """A 2-layer bidirectional LSTM whose three outputs (out, h, c) are all read."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(32, 48, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(96, 4)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.head(out) + h.sum() + c.sum()
