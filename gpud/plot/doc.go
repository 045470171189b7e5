// Package plot draws small line and bar charts as SVG or PNG: the
// simulator's comparison plots and gpuq report --plot. It owns layout and
// the two renderers; callers bring their series. It imports only the
// standard library and golang.org/x/image's fixed font (PNG text), never
// other gpud packages.
package plot
