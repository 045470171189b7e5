// Package process holds what a gpud process does to itself and learns of
// its host: raise its open-files limit (a controller holds a connection
// per node agent), profile its own CPU, read the host's memory. It is a leaf: the daemons' wiring and the
// load-test harness share it.
package process
