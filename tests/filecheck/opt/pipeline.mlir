// RUN: thunder-ir-opt -p decompose-ltorch,canonicalize,cse,dce %s | filecheck %s
// RUN: thunder-ir-opt -p decompose-ltorch,cse --print-between-passes %s | filecheck %s --check-prefix=BETWEEN
// RUN: thunder-ir-opt -t python -p decompose-ltorch,canonicalize,cse,dce %s | filecheck %s --check-prefix=PY
// RUN: thunder-ir-opt --print-python %s | filecheck %s --check-prefix=PY-LTORCH
// RUN: ! thunder-ir-opt -p decompose-ltorch,cs %s 2> %t
// RUN: filecheck %s --check-prefix=UNKNOWN < %t

// A pass pipeline as thunder-ir-opt takes it: decompose, clean up, merge, prune.
// The same broadcast of %b is built twice by the decomposition (two adds); cse merges
// it. alpha = 1 leaves no multiplication; the unused add goes.

func.func @block(%x: !prims.tensor<4x8xf32, cpu>, %b: !prims.tensor<8xf32, cpu>, %w: !prims.tensor<16x8xf32, cpu>) -> !prims.tensor<4x16xf32, cpu> {
  %0 = "ltorch.add"(%x, %b) <{alpha = 1 : i64}> : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<8xf32, cpu>) -> !prims.tensor<4x8xf32, cpu> loc("model.py":3:0)
  %1 = "ltorch.add"(%0, %b) : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<8xf32, cpu>) -> !prims.tensor<4x8xf32, cpu> loc("model.py":4:0)
  %2 = "ltorch.add"(%1, %1) : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<4x8xf32, cpu>) -> !prims.tensor<4x8xf32, cpu> loc("model.py":5:0)
  %3 = "ltorch.linear"(%1, %w) : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<16x8xf32, cpu>) -> !prims.tensor<4x16xf32, cpu> loc("model.py":6:0)
  func.return %3 : !prims.tensor<4x16xf32, cpu>
}

// CHECK-LABEL: func.func @block
// CHECK-NEXT:  %[[B:.*]] = "prims.broadcast_in_dim"(%b) <{shape = array<i64: 4, 8>, broadcast_dims = array<i64: 1>}> {{.*}} loc("model.py":3:0)
// CHECK-NEXT:  %[[A0:.*]] = "prims.add"(%x, %[[B]]) {{.*}} loc("model.py":3:0)
// CHECK-NEXT:  %[[A1:.*]] = "prims.add"(%[[A0]], %[[B]]) {{.*}} loc("model.py":4:0)
// CHECK-NEXT:  %[[Y:.*]] = "prims.linear"(%[[A1]], %w) {{.*}} loc("model.py":6:0)
// CHECK-NEXT:  func.return %[[Y]]

// BETWEEN:      IR after decompose-ltorch:
// BETWEEN-NOT:  ltorch.
// BETWEEN-COUNT-2: "prims.broadcast_in_dim"(%b)
// BETWEEN:      builtin.module
// BETWEEN-COUNT-1: "prims.broadcast_in_dim"(%b)
// BETWEEN-NOT:  "prims.broadcast_in_dim"(%b)

// PY:      def block(x, b, w):
// PY:      prims.broadcast_in_dim(b, shape=(4, 8), broadcast_dims=(1,))
// PY:      prims.linear(
// PY-NOT:  ltorch.

// PY-LTORCH: def block(x, b, w):
// PY-LTORCH: ltorch.add(x, b, alpha=1)
// PY-LTORCH: ltorch.linear(

// UNKNOWN: thunder-ir-opt: unknown pass 'cs'. Did you mean 'cse'? Available passes: autodiff, canonicalize, claim, cse, dce, ddp-allreduce, decompose-for-grad, decompose-ltorch, del-last-used, flatten-cat-chains, fsdp-grad-scale, fsdp-zero3, fuse, join-padded-sums, lower-claimed, lower-to-torch, quantize-weights, remat-split, restride-outputs, schedule-collectives, strip-autograd
