// RUN: thunder-ir-opt --split-input-file %s | thunder-ir-opt --split-input-file --print-op-generic | thunder-ir-opt --split-input-file | filecheck %s

// Every dtype (i1 is bool, ui8 is uint8), the devices cpu / meta / cuda:N, 0-d and
// empty tensors, and the three number kinds (bool i1, int i64, float f64).

func.func @types(%b8: !prims.tensor<2xi1, cpu>, %u8: !prims.tensor<2xui8, cpu>, %i8: !prims.tensor<2xi8, cpu>, %i16: !prims.tensor<2xi16, cpu>, %i32: !prims.tensor<2xi32, cpu>, %i64: !prims.tensor<2xi64, cpu>, %f16: !prims.tensor<2xf16, cpu>, %bf16: !prims.tensor<2xbf16, cpu>, %f32: !prims.tensor<2xf32, cpu>, %f64: !prims.tensor<2xf64, cpu>, %scalar: !prims.tensor<f32, meta>, %empty: !prims.tensor<0x3xf32, cuda:1>, %big: !prims.tensor<2x3x4x5xbf16, cuda:0>, %flag: !prims.number<i1>, %n: !prims.number<i64>, %x: !prims.number<f64>) -> (!prims.tensor<2xi1, cpu>, !prims.tensor<f32, meta>, !prims.number<f64>) {
  func.return %b8, %scalar, %x : !prims.tensor<2xi1, cpu>, !prims.tensor<f32, meta>, !prims.number<f64>
}

// CHECK: builtin.module {
// CHECK-NEXT: func.func @types(%b8: !prims.tensor<2xi1, cpu>, %u8: !prims.tensor<2xui8, cpu>, %i8: !prims.tensor<2xi8, cpu>, %i16: !prims.tensor<2xi16, cpu>, %i32: !prims.tensor<2xi32, cpu>, %i64: !prims.tensor<2xi64, cpu>, %f16: !prims.tensor<2xf16, cpu>, %bf16: !prims.tensor<2xbf16, cpu>, %f32: !prims.tensor<2xf32, cpu>, %f64: !prims.tensor<2xf64, cpu>, %scalar: !prims.tensor<f32, meta>, %empty: !prims.tensor<0x3xf32, cuda:1>, %big: !prims.tensor<2x3x4x5xbf16, cuda:0>, %flag: !prims.number<i1>, %n: !prims.number<i64>, %x: !prims.number<f64>) -> (!prims.tensor<2xi1, cpu>, !prims.tensor<f32, meta>, !prims.number<f64>) {
// CHECK-NEXT: func.return %b8, %scalar, %x : !prims.tensor<2xi1, cpu>, !prims.tensor<f32, meta>, !prims.number<f64>
// CHECK-NEXT: }
// CHECK-NEXT: }

// -----
// Types parse with spaces where MLIR allows them.

func.func @spaced(%a: !prims.tensor< 1x2x3xf16 , cuda : 7 >) -> !prims.tensor<1x2x3xf16, cuda:7> {
  func.return %a : !prims.tensor<1x2x3xf16, cuda:7>
}

// CHECK: func.func @spaced(%a: !prims.tensor<1x2x3xf16, cuda:7>) -> !prims.tensor<1x2x3xf16, cuda:7> {
