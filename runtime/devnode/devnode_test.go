package devnode

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseCharMajors(t *testing.T) {
	const procDevices = `Character devices:
  1 mem
  4 /dev/vc/0
195 nvidia-frontend
511 nvidia-uvm
510 nvidia-nvswitch

Block devices:
  7 loop
509 blkext
`
	used, err := parseCharMajors(strings.NewReader(procDevices))
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint32]bool{1: true, 4: true, 195: true, 511: true, 510: true}
	if diff := cmp.Diff(want, used); diff != "" {
		t.Errorf("majors (-want +got):\n%s", diff)
	}
	// 509 is a block major, so it is free for a char device.
	if got, err := pickUnusedMajor(used); err != nil || got != 509 {
		t.Errorf("pickUnusedMajor = %d, %v; want 509", got, err)
	}
	if _, err := parseCharMajors(strings.NewReader("Character devices:\nxx mem\n")); err == nil {
		t.Error("parseCharMajors accepted a malformed line")
	}
}
