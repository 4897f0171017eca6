// Package openblas binds the one OpenBLAS routine package tensor needs,
// cblas_sgemm, for builds with the openblas tag and cgo. It lives apart
// from tensor because a cgo package cannot hold Go assembly. Without the
// tag the package is empty.
package openblas
