//go:build !race

package comm_test

// raceEnabled reports a -race build, whose instrumentation allocates and
// slows every operation.
const raceEnabled = false
