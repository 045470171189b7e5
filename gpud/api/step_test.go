package api

import (
	"bufio"
	"bytes"
	"io"
	"testing"
)

func TestStepFrames(t *testing.T) {
	var b bytes.Buffer
	big := bytes.Repeat([]byte("x"), maxStepData+10)
	for _, err := range []error{
		WriteStepMsg(&b, StepMsg{Kind: StepStarted, Step: 2, NTasks: 4, Nodes: []string{"n1", "n2"}}),
		WriteStepOutput(&b, StepStdout, 3, []byte("hello\n")),
		WriteStepOutput(&b, StepStderr, 1, big),
		WriteStepMsg(&b, StepMsg{Kind: StepDone, Code: 3}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&b)
	var got []StepMsg
	for {
		m, err := ReadStepFrame(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if len(got) != 5 || got[0].Step != 2 || got[0].Nodes[1] != "n2" ||
		got[1].Kind != StepStdout || got[1].Task != 3 || string(got[1].Data) != "hello\n" ||
		got[2].Kind != StepStderr || got[2].Task != 1 || len(got[2].Data) != maxStepData || len(got[3].Data) != 10 ||
		got[4].Kind != StepDone || got[4].Code != 3 {
		t.Errorf("frames read back as %+v", got)
	}
	if _, err := ReadStepFrame(bufio.NewReader(bytes.NewReader([]byte("Z")))); err == nil {
		t.Error("a bad frame type was accepted")
	}
}
