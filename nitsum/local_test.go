package nitsum

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func ids(rs []Request) string {
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(r.ID)
	}
	return b.String()
}

// C10: a batch takes feasible requests first, then best-effort, then
// background, each first come first served, never above the cap.
func TestLocalBatchOrderAndCap(t *testing.T) {
	l, err := NewLocal(4)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		id string
		c  Class
	}{
		{"bg1", Background}, {"be1", BestEffort}, {"f1", Feasible}, {"bg2", Background},
		{"f2", Feasible}, {"be2", BestEffort}, {"f3", Feasible},
	} {
		if err := l.Push(Request{ID: p.id}, p.c); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		room int
		want string
	}{
		{100, "f1 f2 f3 be1"}, // the cap, not the room, binds
		{0, ""},
		{-3, ""},
		{2, "be2 bg1"}, // the room binds
		{4, "bg2"},
		{4, ""},
	} {
		if got := ids(l.NextBatch(nil, c.room)); got != c.want {
			t.Errorf("NextBatch(room %d) = %q, want %q", c.room, got, c.want)
		}
	}
	// A feasible arrival overtakes best-effort work queued before it.
	for _, p := range []struct {
		id string
		c  Class
	}{{"be3", BestEffort}, {"bg3", Background}, {"f4", Feasible}} {
		if err := l.Push(Request{ID: p.id}, p.c); err != nil {
			t.Fatal(err)
		}
	}
	if got := ids(l.NextBatch(nil, 2)); got != "f4 be3" {
		t.Errorf("batch %q, want \"f4 be3\"", got)
	}
	if l.Len(Background) != 1 || l.Len(Feasible) != 0 || l.Len(Class(9)) != 0 {
		t.Errorf("queues %d %d %d, want 0 0 1", l.Len(Feasible), l.Len(BestEffort), l.Len(Background))
	}
}

// Random pushes and batches against a model: every batch is as full as
// min(room, cap, queued) allows, ordered by class then arrival, and no
// request is lost or taken twice.
func TestLocalAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 50 {
		capB := 1 + rng.IntN(8)
		l, err := NewLocal(capB)
		if err != nil {
			t.Fatal(err)
		}
		var model [numClasses][]Request
		next := 0
		for range 500 {
			if rng.IntN(3) > 0 {
				c := Class(rng.IntN(numClasses))
				r := Request{ID: fmt.Sprint(next)}
				next++
				if err := l.Push(r, c); err != nil {
					t.Fatal(err)
				}
				model[c] = append(model[c], r)
				continue
			}
			room := rng.IntN(12) - 2
			got := l.NextBatch(nil, room)
			var want []Request
			for c := range model {
				k := min(max(0, min(room, capB)-len(want)), len(model[c]))
				want = append(want, model[c][:k]...)
				model[c] = model[c][k:]
			}
			if ids(got) != ids(want) {
				t.Fatalf("trial %d (cap %d, room %d): batch %q, want %q", trial, capB, room, ids(got), ids(want))
			}
			if len(got) > capB {
				t.Fatalf("batch of %d above cap %d", len(got), capB)
			}
		}
		for c := range model {
			if l.Len(Class(c)) != len(model[c]) {
				t.Fatalf("trial %d: class %d holds %d, want %d", trial, c, l.Len(Class(c)), len(model[c]))
			}
		}
	}
}

func TestLocalErrors(t *testing.T) {
	if _, err := NewLocal(0); err == nil {
		t.Error("NewLocal(0): no error")
	}
	l, err := NewLocal(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Push(Request{ID: "x"}, Class(3)); err == nil || !strings.Contains(err.Error(), "unknown class 3") {
		t.Errorf("push of class 3: %v", err)
	}
}

// BenchmarkLocal pushes and takes 64 requests of mixed classes per op
// through a cap of 16.
func BenchmarkLocal(b *testing.B) {
	l, err := NewLocal(16)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]Request, 0, 16)
	for b.Loop() {
		for i := range 64 {
			if err := l.Push(Request{ID: "r", Tier: i}, Class(i%numClasses)); err != nil {
				b.Fatal(err)
			}
		}
		for range 4 {
			batch = l.NextBatch(batch[:0], 16)
		}
	}
}

// After BestEffortNewestFirst, best-effort requests leave newest first,
// still behind every feasible one and ahead of background work; feasible
// and background order is unchanged; the queue's space is reused across
// mixed pops from both ends.
func TestLocalBestEffortNewestFirst(t *testing.T) {
	l, err := NewLocal(3)
	if err != nil {
		t.Fatal(err)
	}
	l.BestEffortNewestFirst()
	for _, p := range []struct {
		id string
		c  Class
	}{
		{"be1", BestEffort}, {"bg1", Background}, {"f1", Feasible}, {"be2", BestEffort},
		{"f2", Feasible}, {"be3", BestEffort}, {"bg2", Background}, {"be4", BestEffort},
	} {
		if err := l.Push(Request{ID: p.id}, p.c); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"f1 f2 be4", "be3 be2 be1", "bg1 bg2", ""} {
		if got := ids(l.NextBatch(nil, 10)); got != want {
			t.Errorf("NextBatch = %q, want %q", got, want)
		}
	}
	// Many pushes and pops: every request leaves once.
	seen := map[string]bool{}
	for k := range 200 {
		for j := range 3 {
			id := fmt.Sprint("r", k, "-", j)
			if err := l.Push(Request{ID: id}, BestEffort); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range l.NextBatch(nil, 2) {
			if seen[r.ID] {
				t.Fatalf("%s left twice", r.ID)
			}
			seen[r.ID] = true
		}
	}
	for l.Len(BestEffort) > 0 {
		for _, r := range l.NextBatch(nil, 3) {
			if seen[r.ID] {
				t.Fatalf("%s left twice", r.ID)
			}
			seen[r.ID] = true
		}
	}
	if len(seen) != 600 {
		t.Errorf("%d of 600 requests left", len(seen))
	}
}
