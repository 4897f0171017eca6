package lora

import (
	"errors"
	"slices"
	"testing"

	"github.com/gearboxlm/gearbox/internal/fixture"
)

// TestRegistry loads, looks up, lists and unloads adapters: ids are
// never reused, names are unique (the model's included), and an unloaded
// adapter is uninstalled once no request runs with it, at the next Load
// or Unload.
func TestRegistry(t *testing.T) {
	cfg := modelConfig(t)
	dir := writeAdapter(t, fixture.LoRA{Seed: 3})
	installed := map[int]string{}
	busy := map[int]bool{}
	install := func(id int, a *Adapter) error {
		if a == nil {
			delete(installed, id)
		} else {
			installed[id] = a.Name
		}
		return nil
	}
	release := func(id int) bool {
		if busy[id] {
			return false
		}
		return install(id, nil) == nil
	}
	first, err := Load("first", dir, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	installed[1] = "first"
	r := NewRegistry(cfg, 16, install, release, []string{"base"}, []*Adapter{first})
	if id, ok := r.Lookup("first"); !ok || id != 1 || r.Name(1) != "first" {
		t.Fatalf("Lookup(first) = %d, %v", id, ok)
	}
	if _, ok := r.Lookup("base"); ok {
		t.Fatal("the model's name is an adapter")
	}
	for _, name := range []string{"base", "first"} {
		if _, err := r.Load(name, dir); !errors.Is(err, ErrExists) {
			t.Fatalf("Load(%s): %v", name, err)
		}
	}
	if _, err := r.Load("bad", t.TempDir()); err == nil {
		t.Fatal("an empty directory loaded")
	}
	a, err := r.Load("second", dir)
	if err != nil || a.Name != "second" || installed[2] != "second" {
		t.Fatalf("Load(second) = %v, %v; installed %v", a, err, installed)
	}
	busy[1] = true // a request runs with first
	if err := r.Unload("first"); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("first"); ok || r.Name(1) != "" || installed[1] != "first" {
		t.Fatalf("after unloading a busy adapter: lookup %v, installed %v", ok, installed)
	}
	if err := r.Unload("first"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Unload: %v", err)
	}
	busy[1] = false
	if _, err := r.Load("first", dir); err != nil { // the name is free again; the old id is swept
		t.Fatal(err)
	}
	if id, _ := r.Lookup("first"); id != 3 || installed[1] != "" || installed[3] != "first" {
		t.Fatalf("reloaded first as %d; installed %v", id, installed)
	}
	var names []string
	for _, a := range r.List() {
		names = append(names, a.Name)
	}
	if !slices.Equal(names, []string{"second", "first"}) {
		t.Fatalf("List = %v", names)
	}
	if err := r.Unload("second"); err != nil || installed[2] != "" {
		t.Fatalf("Unload(second): %v; installed %v", err, installed)
	}
}
