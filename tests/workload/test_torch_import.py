"""PyTorch import: totals of hand-built ResNet-50 and GPT-2 modules match the zoo.

torchvision and transformers are not dependencies: the reference modules are written here in
their published layouts (torchvision ResNet-50 v1.5; HuggingFace GPT-2 small with tied head).
Skipped, with the reason, when torch is not installed.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: the PyTorch importer is optional")
nn = torch.nn

from perfmodel.workload import LayerKind, build_model  # noqa: E402
from perfmodel.workload.torch_import import from_torch  # noqa: E402


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        return self.relu(self.bn3(self.conv3(y)) + idt)


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        blocks, cin = [], 64
        for n, width, stride in ((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)):
            for i in range(n):
                blocks.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = 4 * width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class Block(nn.Module):
    def __init__(self, h: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(h)
        self.c_attn = nn.Linear(h, 3 * h)
        self.c_proj = nn.Linear(h, h)
        self.ln_2 = nn.LayerNorm(h)
        self.c_fc = nn.Linear(h, 4 * h)
        self.mlp_proj = nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (h // self.heads) ** 0.5
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, h)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(nn.functional.gelu(self.c_fc(self.ln_2(x))))


class GPT2(nn.Module):
    def __init__(self, vocab=50257, positions=1024, h=768, layers=12, heads=12) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(positions, h)
        self.h = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)
        self.lm_head = nn.Linear(h, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def _gemm_fwd(w, kinds=(LayerKind.CONV, LayerKind.LINEAR, LayerKind.MATMUL)) -> float:
    return sum(la.fwd_flop for la in w.layers if la.kind in kinds and la.gemm is not None)


def test_resnet50_totals_match_zoo() -> None:
    x = torch.empty(8, 3, 224, 224, device="meta")
    with torch.device("meta"):  # build without allocating weights
        model = ResNet50()
    imported = from_torch(model, x, name="resnet50-torch")
    zoo = build_model("resnet50", batch_size=8)
    assert imported.total_params == zoo.total_params == 25_557_032
    assert imported.params == imported.total_params
    assert imported.batch_size == 8
    assert _gemm_fwd(imported) == pytest.approx(_gemm_fwd(zoo), rel=1e-6)
    assert imported.total_flop == pytest.approx(zoo.total_flop, rel=0.02)
    convs = [la for la in imported.layers if la.kind is LayerKind.CONV]
    assert len(convs) == 53 and convs[0].bwd_input_flop == 0


def test_gpt2_totals_match_zoo() -> None:
    ids = torch.zeros(2, 128, dtype=torch.long, device="meta")
    with torch.device("meta"):
        model = GPT2()
    imported = from_torch(model, ids, precision="bf16")
    zoo = build_model("gpt2", batch_size=2, seq_len=128, precision="bf16", dropout=False)
    assert imported.total_params == zoo.total_params == 124_439_808
    assert imported.params == imported.total_params
    assert _gemm_fwd(imported) == pytest.approx(_gemm_fwd(zoo), rel=1e-3)


def test_flop_counter_mode_agrees() -> None:
    """torch's own FlopCounterMode counts the same forward GEMM FLOP on the meta device."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = GPT2(layers=2)
    ids = torch.zeros(2, 64, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as fc:
        model(ids)
    imported = from_torch(model, ids)
    gemm_flop = sum(la.gemm.flop for la in imported.layers if la.gemm is not None)
    assert gemm_flop == pytest.approx(fc.get_total_flops(), rel=1e-9)


def test_fused_attention_and_unassigned_parameters() -> None:
    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cls = nn.Parameter(torch.zeros(1, 1, 64))
            self.proj = nn.Linear(64, 192)

        def forward(self, x):
            x = torch.cat([self.cls.expand(x.shape[0], 1, 64), x], dim=1)
            q, k, v = self.proj(x).view(x.shape[0], x.shape[1], 3, 4, 16).unbind(2)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    w = from_torch(Tiny(), torch.empty(2, 31, 64))
    att = [la for la in w.layers if la.kind is LayerKind.ATTENTION]
    assert len(att) == 1
    assert att[0].fwd_flop == pytest.approx(4 * 2 * 32 * 32 * 4 * 16 / 2)
    assert w.params == w.total_params == 64 + 64 * 192 + 192
    assert any(la.name == "unassigned_parameters" and la.params == 64 for la in w.layers)


def test_original_module_untouched_and_errors_typed() -> None:
    from perfmodel.errors import ConfigError

    m = nn.Linear(4, 4)
    from_torch(m, torch.empty(3, 4))
    assert m.weight.device.type == "cpu"

    class Bad(nn.Module):
        def forward(self, x):
            return x.item()  # needs data: impossible on meta

    with pytest.raises(ConfigError, match="meta"):
        from_torch(Bad(), torch.empty(1))


def test_dilated_and_grouped_convolutions() -> None:
    m = nn.Sequential(
        nn.Conv2d(16, 32, 3, padding=2, dilation=2, bias=False),
        nn.Conv2d(32, 32, 3, padding=1, groups=32),
    )
    w = from_torch(m, torch.empty(4, 16, 20, 20))
    c1, c2 = (la for la in w.layers if la.kind is LayerKind.CONV)
    assert c1.output_shape == (4, 32, 20, 20)
    assert c1.fwd_flop == 2 * 4 * 20 * 20 * 32 * 16 * 9
    assert c2.gemm.batch == 32 and c2.params == 32 * 9 + 32


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_string_padding_of_dilated_convolutions_keeps_torchs_output_shape(padding: str) -> None:
    """padding="same"/"valid" is read back from the output shape; a dilated kernel spans
    ``d (k - 1) + 1`` inputs (the padding used to be solved with ``k``: a 3x3 kernel of
    dilation 2 with "same" lost two rows and columns, with "valid" the padding went negative)."""
    x = torch.randn(2, 3, 32, 40)
    conv2d = nn.Conv2d(3, 8, 3, padding=padding, dilation=2)
    conv1d = nn.Conv1d(3, 8, 5, padding=padding, dilation=3)
    w2 = from_torch(conv2d, x)
    w1 = from_torch(conv1d, torch.randn(2, 3, 50))
    with torch.no_grad():
        y2 = tuple(conv2d(x).shape)
        y1 = tuple(conv1d(torch.randn(2, 3, 50)).shape)
    assert w2.layers[0].output_shape == y2
    assert w2.layers[0].gemm.m == y2[0] * y2[2] * y2[3]
    assert w1.layers[0].output_shape == (y1[0], y1[1], 1, y1[2])
    assert w1.layers[0].gemm.m == y1[0] * y1[2]
