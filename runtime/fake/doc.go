// Package fake is a scripted, in-memory runtime.Runtime for tests of the
// node agent and of anything that drives it. Each container ID can be given
// a Script (start error, exit at once, exit on a signal, OOM, hang on stop);
// the fake records every TaskConfig and signal so tests can assert on them,
// and lets a test end a task when it chooses (Exit) or plant containers that
// an earlier agent left behind (Add).
//
// It follows the runtime.Runtime contract exactly: Start refuses a used ID
// with os.ErrExist, Wait returns at once for an exited task, Delete of a
// missing ID is not an error and kills a running task first, List reports
// every container. It imports only the standard library and runtime, never
// gpud/*.
package fake
