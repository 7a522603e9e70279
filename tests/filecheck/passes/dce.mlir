// RUN: thunder-ir-opt --split-input-file -p dce %s | filecheck %s

// Unused pure ops go, chains included; an unused random draw and an unused opaque call
// stay (they advance the RNG stream or may have effects).

func.func @dead(%x: !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu> {
  %0 = "prims.exp"(%x) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  %1 = "prims.neg"(%0) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  %2 = "prims.sum"(%1) <{dims = array<i64: 0, 1>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<f32, cpu>
  %3 = "prims.bernoulli"() <{shape = array<i64: 2>, p = 5.000000e-01 : f64, device = "cpu", dtype = f32}> : () -> !prims.tensor<2xf32, cpu>
  %4 = "torch.call"(%x) <{callee = "torch.nn.functional.dropout", args = [#prims.operand<0>]}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  %5 = "prims.cos"(%x) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  func.return %5 : !prims.tensor<2x3xf32, cpu>
}

// CHECK-LABEL: func.func @dead
// CHECK-NEXT:  "prims.bernoulli"()
// CHECK-NEXT:  "torch.call"(%x)
// CHECK-NEXT:  %[[C:.*]] = "prims.cos"(%x)
// CHECK-NEXT:  func.return %[[C]]

// -----

// A fusion region is as pure as its body: an unused pure region goes, an unused region
// drawing random numbers stays.

func.func @regions(%x: !prims.tensor<2xf32, cpu>, %seed: !prims.number<i64>) -> !prims.tensor<2xf32, cpu> {
  %0 = "fusion.region"(%x) <{executor = "torch_compile", kernel = "pure"}> ({
  ^bb0(%a: !prims.tensor<2xf32, cpu>):
    %e = "prims.exp"(%a) : (!prims.tensor<2xf32, cpu>) -> !prims.tensor<2xf32, cpu>
    "fusion.yield"(%e) : (!prims.tensor<2xf32, cpu>) -> ()
  }) : (!prims.tensor<2xf32, cpu>) -> !prims.tensor<2xf32, cpu>
  %1 = "fusion.region"(%x, %seed) <{executor = "torch_compile", kernel = "random"}> ({
  ^bb0(%a: !prims.tensor<2xf32, cpu>, %s: !prims.number<i64>):
    %u = "prims.bernoulli"() <{shape = array<i64: 2>, p = 5.000000e-01 : f64, device = "cpu", dtype = f32}> : () -> !prims.tensor<2xf32, cpu>
    %m = "prims.mul"(%a, %u) : (!prims.tensor<2xf32, cpu>, !prims.tensor<2xf32, cpu>) -> !prims.tensor<2xf32, cpu>
    "fusion.yield"(%m) : (!prims.tensor<2xf32, cpu>) -> ()
  }) : (!prims.tensor<2xf32, cpu>, !prims.number<i64>) -> !prims.tensor<2xf32, cpu>
  func.return %x : !prims.tensor<2xf32, cpu>
}

// CHECK-LABEL: func.func @regions
// CHECK-NOT:   kernel = "pure"
// CHECK:       "fusion.region"(%x, %seed) <{executor = "torch_compile", kernel = "random"}>
// CHECK:       "prims.bernoulli"
// CHECK:       func.return %x
