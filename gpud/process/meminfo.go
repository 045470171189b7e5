package process

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// HostMemMiB reads MemTotal from /proc/meminfo.
func HostMemMiB() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("detect memory: %w; set [node] mem", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kib, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("detect memory: parse %q: %w", sc.Text(), err)
			}
			return kib / 1024, nil
		}
	}
	return 0, fmt.Errorf("detect memory: no MemTotal in /proc/meminfo; set [node] mem")
}
