package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/runtime"
)

// listPuller is a runtime.ImagePuller whose cache is imgs.
type listPuller struct {
	imgs  []runtime.CachedImage
	lists int
}

func (p *listPuller) PullImage(context.Context, runtime.PullRequest) (runtime.PullResult, error) {
	return runtime.PullResult{}, nil
}

func (p *listPuller) CachedImages(context.Context) ([]runtime.CachedImage, error) {
	p.lists++
	return p.imgs, nil
}

// TestInventorySentWhenChanged: the inventory goes with a heartbeat only
// while the controller does not hold its version; a pull makes the node
// list its cache again; names are the scheduler's (spec.ImageKey).
func TestInventorySentWhenChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := &listPuller{imgs: []runtime.CachedImage{{Ref: "docker.io/library/ubuntu:22.04"}, {Ref: "reg:5000/a:1"}}}
	var s imageState
	inv := s.inventory(ctx, p)
	if inv == nil || fmt.Sprint(inv.Images) != "[docker.io/library/ubuntu:22.04 reg:5000/a:1]" || inv.Version == "" {
		t.Fatalf("first inventory = %+v", inv)
	}
	if again := s.inventory(ctx, p); again == nil || again.Version != inv.Version {
		t.Fatalf("unanswered inventory not sent again: %+v", again)
	}
	s.answered(inv.Version)
	if again := s.inventory(ctx, p); again != nil {
		t.Fatalf("inventory the controller holds sent again: %+v", again)
	}
	lists := p.lists
	progress, done := s.startPull(7, false)
	progress(runtime.PullProgress{Done: 3, Total: 4})
	if got := s.pullsNow(); len(got) != 1 || got[0] != (api.PullProgress{Job: 7, Done: 3, Total: 4}) {
		t.Fatalf("pulls = %+v", got)
	}
	p.imgs = append(p.imgs, runtime.CachedImage{Ref: "reg:5000/b:2"})
	done()
	if got := s.pullsNow(); len(got) != 0 {
		t.Fatalf("pulls after the pull ended = %+v", got)
	}
	inv2 := s.inventory(ctx, p)
	if p.lists != lists+1 || inv2 == nil || len(inv2.Images) != 3 || inv2.Version == inv.Version {
		t.Fatalf("after a pull: listed %d times more, inventory %+v", p.lists-lists, inv2)
	}
	s.answered("") // a restarted controller holds none
	if again := s.inventory(ctx, p); again == nil {
		t.Fatal("inventory not sent to a controller that holds none")
	}
}

// TestInventoryBounded: a node reports its api.MaxNodeImages most
// recently used images.
func TestInventoryBounded(t *testing.T) {
	t.Parallel()
	var imgs []runtime.CachedImage
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range api.MaxNodeImages + 10 {
		imgs = append(imgs, runtime.CachedImage{Ref: fmt.Sprintf("reg:5000/i%04d:1", i), LastUsed: t0.Add(time.Duration(i) * time.Minute)})
	}
	names, _ := inventoryOf(imgs)
	if len(names) != api.MaxNodeImages || names[0] != "reg:5000/i0010:1" {
		t.Fatalf("inventory of %d images: %d names from %s, want %d from the 11th oldest", len(imgs), len(names), names[0], api.MaxNodeImages)
	}
}
