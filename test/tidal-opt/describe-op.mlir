// One entry tells an op's whole story: its definition and every transformation's rule.
// RUN: tidal-opt --describe-op tidal.scan | filecheck %s
// RUN: not tidal-opt --describe-op tidal.nope 2>&1 | filecheck %s --check-prefix=UNKNOWN

// CHECK: tidal.scan: sequential scan with carries and stacked outputs (scan)
// CHECK: operands:
// CHECK-NEXT: init...
// CHECK-NEXT: xs...
// CHECK-NEXT: consts...
// CHECK: attributes:
// CHECK-NEXT: num_carries
// CHECK-NEXT: num_xs
// CHECK-NEXT: dim
// CHECK-NEXT: reverse
// CHECK: regions:
// CHECK-NEXT: body {{ +}}(carry..., x_t..., consts...) -> tidal.yield carry'..., y_t...
// CHECK: defined by the dialect:
// CHECK-NEXT: verifier {{ +}}tidal.dialects.scan.verify_scan (dialects/scan.py:{{[0-9]+}})
// CHECK-NEXT: builder {{ +}}tidal.dialects.scan.build_scan (dialects/scan.py:{{[0-9]+}})
// CHECK: rules attached by transformations:
// CHECK-NEXT: autodiff {{ +}}tidal.autodiff.scan.scan_vjp (python/tidal/autodiff/scan.py:{{[0-9]+}})
// CHECK-NEXT: lower-to-scf {{ +}}tidal.conversion.tidal_to_scf.scan.lower_scan_to_scf (python/tidal/conversion/tidal_to_scf/scan.py:{{[0-9]+}})
// CHECK-NEXT: (no rule from: cpu-aten-call)

// UNKNOWN: tidal-opt: error: unknown op 'tidal.nope' (tidal ops: tidal.aten_call, tidal.associative_scan, tidal.cond, tidal.map, tidal.parallelism, tidal.scan, tidal.while)

// RUN: tidal-opt --describe-op tidal.aten_call | filecheck %s --check-prefix=ATEN
// ATEN: tidal.aten_call: an ATen operator called as a library kernel
// ATEN: rules attached by transformations:
// ATEN-NEXT: cpu-aten-call {{ +}}tidal.backends.cpu.aten_runtime.lower_aten_call (python/tidal/backends/cpu/aten_runtime.py:{{[0-9]+}})
// ATEN-NEXT: (no rule from: autodiff, lower-to-scf)
