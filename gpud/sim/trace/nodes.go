package trace

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/sim"
)

// ReadNodes reads a node list: Alibaba openb (sn, cpu_milli, memory_mib,
// gpu, model) or PAI 2020 (machine, gpu_type, cap_cpu, cap_mem, cap_gpu).
// Nodes without GPUs are kept: CPU-only jobs may use them.
func ReadNodes(path string) ([]sim.NodeSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read node list: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(bufio.NewReader(f))
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("read node list %s header: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.ToLower(strings.TrimSpace(h))] = i
	}
	type layout struct{ name, cpu, mem, gpu, model string }
	var l layout
	var cpuScale, memScale float64
	switch {
	case has(col, "sn", "cpu_milli", "memory_mib", "gpu", "model"):
		l, cpuScale, memScale = layout{"sn", "cpu_milli", "memory_mib", "gpu", "model"}, 1.0/1000, 1
	case has(col, "machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"):
		l, cpuScale, memScale = layout{"machine", "cap_cpu", "cap_mem", "cap_gpu", "gpu_type"}, 1, 1024
	default:
		return nil, fmt.Errorf("node list %s: header %q is neither openb (sn,cpu_milli,memory_mib,gpu,model) nor PAI (machine,gpu_type,cap_cpu,cap_mem,cap_gpu)", path, strings.Join(head, ","))
	}
	var nodes []sim.NodeSpec
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("node list %s line %d: %w", path, line, err)
		}
		num := func(c string) (float64, error) {
			v, err := strconv.ParseFloat(strings.TrimSpace(rec[col[c]]), 64)
			if err != nil {
				return 0, fmt.Errorf("node list %s line %d column %s: %q is not a number", path, line, c, rec[col[c]])
			}
			return v, nil
		}
		cpu, err := num(l.cpu)
		if err != nil {
			return nil, err
		}
		mem, err := num(l.mem)
		if err != nil {
			return nil, err
		}
		gpu, err := num(l.gpu)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, sim.NodeSpec{Name: rec[col[l.name]], CPUs: int(cpu * cpuScale), MemMiB: int64(mem * memScale),
			GPUs: int(gpu), Model: strings.ToLower(rec[col[l.model]])})
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("node list %s has no nodes", path)
	}
	return nodes, nil
}

func has(col map[string]int, names ...string) bool {
	for _, n := range names {
		if _, ok := col[n]; !ok {
			return false
		}
	}
	return true
}
