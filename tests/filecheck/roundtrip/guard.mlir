// RUN: thunder-ir-opt %s | thunder-ir-opt --print-op-generic | thunder-ir-opt | filecheck %s
// RUN: thunder-ir-opt -t python %s | filecheck %s --check-prefix=PY
// RUN: thunder-ir-opt -p 'strip-autograd,claim,decompose-ltorch,cse,dce,lower-claimed{executors="torch"},lower-to-torch,del-last-used{executors="torch"}' %s | filecheck %s --check-prefix=JIT

// A program module as jit compiles it: @forward, then the cache key's @prologue (guard
// ops). The prologue round-trips, prints as the key function the cache runs (one tuple
// expression: a number argument's leaf read through _meta, the aliasing check, the
// parameter bound as p0, the tokens as _tokens), and the jit pipeline leaves it alone.

func.func @forward(%x: !prims.tensor<3x4xf32, cpu>, %scale: !prims.number<f64>, %t_weight: !prims.tensor<2x4xf32, cpu>) -> !prims.tensor<3x2xf32, cpu> {
  %0 = "ltorch.mul"(%x, %scale) : (!prims.tensor<3x4xf32, cpu>, !prims.number<f64>) -> !prims.tensor<3x4xf32, cpu> loc("model.py":3:0)
  %1 = "ltorch.linear"(%0, %t_weight) : (!prims.tensor<3x4xf32, cpu>, !prims.tensor<2x4xf32, cpu>) -> !prims.tensor<3x2xf32, cpu> loc("model.py":4:0)
  func.return %1 : !prims.tensor<3x2xf32, cpu>
}
func.func @prologue(%a0: !guard.value, %a1: !guard.value) -> !guard.value {
  %0 = "guard.leaf_meta"(%a0) <{label = "x"}> : (!guard.value) -> !guard.value
  %1 = "guard.leaf_meta"(%a1) <{label = "scale"}> : (!guard.value) -> !guard.value
  %2 = "guard.aliases"(%a0, %a1) : (!guard.value, !guard.value) -> !guard.value
  %3 = "guard.state_meta"() <{names = ["weight"]}> : () -> !guard.value
  %4 = "guard.grad_mode"() : () -> !guard.value
  %5 = "guard.inference_mode"() : () -> !guard.value
  %6 = "guard.default_dtype"() : () -> !guard.value
  %7 = "guard.deterministic"() : () -> !guard.value
  %8 = "guard.default_device"() : () -> !guard.value
  %9 = "guard.autocast"() : () -> !guard.value
  %10 = "guard.tokens"() <{tokens = array<i64: 0, 1>, names = ["module attributes", "globals of model"]}> : () -> !guard.value
  %11 = "guard.key"(%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10) : (!guard.value, !guard.value, !guard.value, !guard.value, !guard.value, !guard.value, !guard.value, !guard.value, !guard.value, !guard.value, !guard.value) -> !guard.value
  func.return %11 : !guard.value
}

// CHECK-LABEL: func.func @forward
// CHECK-LABEL: func.func @prologue(%a0: !guard.value, %a1: !guard.value) -> !guard.value {
// CHECK-NEXT:    %[[X:.*]] = "guard.leaf_meta"(%a0) <{label = "x"}> : (!guard.value) -> !guard.value
// CHECK-NEXT:    %[[S:.*]] = "guard.leaf_meta"(%a1) <{label = "scale"}> : (!guard.value) -> !guard.value
// CHECK-NEXT:    %[[A:.*]] = "guard.aliases"(%a0, %a1) : (!guard.value, !guard.value) -> !guard.value
// CHECK-NEXT:    %[[P:.*]] = "guard.state_meta"() <{names = ["weight"]}> : () -> !guard.value
// CHECK-NEXT:    "guard.grad_mode"() : () -> !guard.value
// CHECK-NEXT:    "guard.inference_mode"() : () -> !guard.value
// CHECK-NEXT:    "guard.default_dtype"() : () -> !guard.value
// CHECK-NEXT:    "guard.deterministic"() : () -> !guard.value
// CHECK-NEXT:    "guard.default_device"() : () -> !guard.value
// CHECK-NEXT:    "guard.autocast"() : () -> !guard.value
// CHECK-NEXT:    %[[T:.*]] = "guard.tokens"() <{tokens = array<i64: 0, 1>, names = ["module attributes", "globals of model"]}>
// CHECK-NEXT:    %[[K:.*]] = "guard.key"(%[[X]], %[[S]], %[[A]], %[[P]], {{.*}}, %[[T]])
// CHECK-NEXT:    func.return %[[K]] : !guard.value

// PY:      def forward(x, scale, t_weight):
// PY:      def prologue(args):
// PY-NEXT:   (a0, a1,) = args
// PY-NEXT:   return (_meta(a0), _meta(a1), _aliases(a0, a1), p0.shape, p0.dtype, p0.device, p0.requires_grad, (p0.is_contiguous() or p0.stride()), _grad(), _inference(), _default_dtype(), _deterministic(), (_function_modes() and _default_device()), _autocast(), _tokens,)

// JIT-LABEL: func.func @forward
// JIT:         "torch.call"(%{{.*}}, %t_weight) <{callee = "torch.nn.functional.linear"
// JIT-LABEL: func.func @prologue
// JIT-NEXT:    "guard.leaf_meta"(%a0) <{label = "x"}>
// JIT-NEXT:    "guard.leaf_meta"(%a1) <{label = "scale"}>
// JIT-NEXT:    "guard.aliases"(%a0, %a1)
// JIT-NEXT:    "guard.state_meta"() <{names = ["weight"]}>
// JIT-NEXT:    "guard.grad_mode"()
// JIT-NEXT:    "guard.inference_mode"()
// JIT-NEXT:    "guard.default_dtype"()
// JIT-NEXT:    "guard.deterministic"()
// JIT-NEXT:    "guard.default_device"()
// JIT-NEXT:    "guard.autocast"()
// JIT-NEXT:    "guard.tokens"()
// JIT-NEXT:    "guard.key"
// JIT-NEXT:    func.return
