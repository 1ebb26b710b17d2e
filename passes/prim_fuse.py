"""prim-fuse: fewer, bigger kernels. The driver of the fusion rewrites, each in its own module.

On each graph function, in this order:
  1. Transposes of constants are folded (constant_transposes.py), so the rewrites see constant weights,
     and identical ops are computed once (common_subexpressions.py: the importers repeat per layer).
  2. Op rewrites, tried on every op in program order; after one fires the scan starts again, until none
     does. On each op they are tried in this order (the option that enables each in brackets):
       reshape      view_chains.py         reshape(reshape(x)) -> one reshape, or x where it is x's type [always]
       add .. div   neutral_operands.py    x + 0, x * 1, x - 0, x / 1 -> x [always]
       conv2d       pad_fold.py            conv2d(pad(x, 0)) -> conv2d(x) with the pad in its padding [always]
       batch_norm   batch_norm_fold.py     BN with constant parameters folded into the conv before it [fold-batch-norm]
       add          conv_branches.py       convolutions (and batch norms) of one input summed ->
                                           one convolution of the summed filters [epilogues]
       add, act     epilogues.py           bias, residual and activation as the conv2d/matmul's epilogue,
                                           also through reshapes and transposes [epilogues]
       mul          gelu_tanh_pattern.py   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) -> gelu(x, tanh) [epilogues]
       mul          silu_pattern.py        mul(x, sigmoid(x)) -> silu(x) [epilogues]
       mul          channel_scale.py       a constant channel scale folded into the GEMM's weights [epilogues]
       div          rms_norm_pattern.py    ONNX's decomposed RMSNorm -> rms_norm [elementwise]
       norms        norm_residual.py       layer_norm/rms_norm(x + r) -> the norm with residual r [epilogues]
  3. When no op rewrite fires, the graph rewrites [epilogues]: patch convolutions as GEMMs
     (conv_patches.py), view ops moved around the GEMMs (matmul_views.py) and into attention's layout
     (attention_layout.py), chains of moves that are one transpose written as one (view_chains.py), and
     1x1 convolutions over a channel concat split per concat input (concat_split.py) [concat-split]; if any
     changed, back to 2.
  4. Trees of elementwise ops become one private function each (elementwise_groups.py) [elementwise].
  5. Ops left without uses are dropped (constants, bypassed views).
Chains of concats (concat_chains.py) are outlined the same way, by prim-tile on the CPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from openprim.dialect import graph_functions

from .attention_layout import attention_layouts
from .batch_norm_fold import fold_batch_norm
from .channel_scale import fold_channel_scale
from .common_subexpressions import merge_common_subexpressions
from .concat_split import split_convolutions_over_concats
from .conv_branches import merge_conv_branches
from .constant_transposes import fold_constant_transposes
from .conv_patches import patch_convolutions
from .elementwise_groups import outline_elementwise_groups
from .epilogues import EPILOGUE_OPS, fuse_epilogue
from .fused_functions import fused_count
from .gelu_tanh_pattern import match_gelu_tanh
from .matmul_views import rewrite_views
from .neutral_operands import NEUTRAL, drop_neutral_operand
from .view_chains import collapse_view_chains, merge_reshapes
from .norm_residual import NORMS, fuse_norm_residual
from .pad_fold import fold_pad_into_conv
from .rms_norm_pattern import match_rms_norm
from .silu_pattern import match_silu

NAME = "prim-fuse"


def erase_dead_ops(fn) -> None:
    """Drop the prim ops that nothing reads (every prim op is pure but bounds_check, whose result the
    runtime reads): constants that rewrites left (folded weights, BN parameters) and views an importer
    made that a rewrite bypassed (torch.onnx's group norm view). In reverse order, so chains go at once."""
    for op in reversed([o.operation for o in fn.regions[0].blocks[0].operations]):
        if op.name.startswith("prim.") and op.name != "prim.bounds_check" and \
                not any(list(r.uses) for r in op.results):
            op.erase()


@dataclass
class Options:
    NAME = NAME
    fold_batch_norm: bool = True
    epilogues: bool = True
    elementwise: bool = True
    concat_split: bool = True

    def op_rewrites(self) -> list:
        """(the ops it applies to, rewrite) of step 2 (module docstring), in order, as the options enable them."""
        return [(ops, rewrite) for enabled, ops, rewrite in (
            (True, ("prim.reshape",), merge_reshapes),
            (True, tuple(NEUTRAL), drop_neutral_operand),
            (True, ("prim.conv2d",), fold_pad_into_conv),
            (self.fold_batch_norm, ("prim.batch_norm",), fold_batch_norm),
            (self.epilogues, ("prim.add",), merge_conv_branches),
            (self.epilogues, EPILOGUE_OPS, fuse_epilogue),
            (self.epilogues, ("prim.mul",), match_gelu_tanh),
            (self.epilogues, ("prim.mul",), match_silu),
            (self.epilogues, ("prim.mul",), fold_channel_scale),
            (self.elementwise, ("prim.div",), match_rms_norm),
            (self.epilogues, NORMS, fuse_norm_residual)) if enabled]

    def graph_rewrites(self, fn) -> bool:
        """Step 3 on graph function fn (every rewrite runs); whether any changed it."""
        return self.epilogues and (patch_convolutions(fn) | rewrite_views(fn) | attention_layouts(fn) |
                                   collapse_view_chains(fn) |
                                   (self.concat_split and split_convolutions_over_concats(fn)))

    def entries(self):
        return [(NAME, self.run)]

    def run(self, module_op):
        rewrites = self.op_rewrites()
        with module_op.context:
            count = fused_count(module_op)
            for fn in graph_functions(module_op):
                fold_constant_transposes(fn)
                merge_common_subexpressions(fn)
                changed = True
                while changed:
                    changed = any(op.name in ops and rewrite(op)
                                  for op in [o.operation for o in fn.regions[0].blocks[0].operations]
                                  for ops, rewrite in rewrites) or self.graph_rewrites(fn)
                if self.elementwise:
                    count = outline_elementwise_groups(fn, count)
                erase_dead_ops(fn)
