//go:build race

package controller

// raceDetector: the race detector slows the owner loop about tenfold;
// long runs (TestTwinMatchesController) shrink under it.
const raceDetector = true
