package pmi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
)

// MaxFenceBytes bounds what one node may contribute to one fence (its
// tasks' keys and values, or its PMIx server's data): a step's key-value
// space lives in the agents' memory.
const MaxFenceBytes = 64 << 20

// Fence is a step's fence across its nodes, kept by the agent of the
// step's first node: each node joins every round once with its
// contribution, and once all have joined every node gets all of them, in
// node order. Rounds are counted per node (each node's servers fence in
// the same order, as MPI's collectives do). A node may join a round
// again with the same data (its connection to the first node broke and
// was followed again, and its request or the answer may have been lost):
// it gets the same answer. Safe for concurrent use.
type Fence struct {
	n int

	mu     sync.Mutex
	rounds map[int]*fenceRound
	// last is each node's newest round taken and its answer, for a
	// node that joins it again after the round was dropped.
	last   map[int]lastRound
	err    error // set by Fail: every later Join fails
	failed chan struct{}
}

type lastRound struct {
	round int
	parts [][]byte
}

type fenceRound struct {
	parts  [][]byte
	joined []bool
	count  int
	taken  int
	done   chan struct{}
}

// NewFence returns the fence of a step over nodes nodes.
func NewFence(nodes int) *Fence {
	return &Fence{n: nodes, rounds: map[int]*fenceRound{}, last: map[int]lastRound{}, failed: make(chan struct{})}
}

// Join contributes node's data to round and waits until every node has
// joined it; it returns each node's contribution. It fails when ctx ends,
// when the fence failed (a node's part ended while others waited), or
// when node joins a round again with other data.
func (f *Fence) Join(ctx context.Context, node, round int, data []byte) ([][]byte, error) {
	if node < 0 || node >= f.n {
		return nil, fmt.Errorf("fence: node %d is not one of the step's %d", node, f.n)
	}
	if len(data) > MaxFenceBytes {
		return nil, fmt.Errorf("fence: node %d contributes %d bytes, more than %d", node, len(data), MaxFenceBytes)
	}
	f.mu.Lock()
	if f.err != nil {
		f.mu.Unlock()
		return nil, f.err
	}
	r := f.rounds[round]
	if r == nil {
		if l, ok := f.last[node]; ok && l.round == round {
			f.mu.Unlock()
			if !bytes.Equal(l.parts[node], data) {
				return nil, fmt.Errorf("fence: node %d joined round %d twice with different data", node, round)
			}
			return l.parts, nil // joined again after every node took it
		}
		r = &fenceRound{parts: make([][]byte, f.n), joined: make([]bool, f.n), done: make(chan struct{})}
		f.rounds[round] = r
	}
	again := r.joined[node]
	switch {
	case again && !bytes.Equal(r.parts[node], data):
		f.mu.Unlock()
		return nil, fmt.Errorf("fence: node %d joined round %d twice with different data", node, round)
	case !again:
		r.joined[node], r.parts[node] = true, data
		r.count++
		if r.count == f.n {
			close(r.done)
		}
	}
	f.mu.Unlock()
	select {
	case <-r.done:
	case <-f.failed:
		return nil, f.failure()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if again {
		return r.parts, nil // the first join takes the round
	}
	f.last[node] = lastRound{round, r.parts}
	if r.taken++; r.taken == f.n {
		delete(f.rounds, round)
	}
	return r.parts, nil
}

func (f *Fence) failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Fail ends the fence: waiting and later Joins fail with err. The first
// call wins.
func (f *Fence) Fail(err error) {
	if err == nil {
		err = errors.New("fence: the step ended")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
		close(f.failed)
	}
}
