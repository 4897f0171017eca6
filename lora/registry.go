package lora

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gearboxlm/gearbox/model"
)

// Errors of a Registry.
var (
	ErrExists   = errors.New("lora: an adapter of that name is loaded")
	ErrNotFound = errors.New("lora: no adapter of that name is loaded")
)

// Registry is the adapters a server serves, by name and by the id the
// engine and the executor know each by, loaded at start and at run time
// (vLLM's /v1/load_lora_adapter). Ids are never reused: a request that
// resolved a name just before its adapter was unloaded is refused for an
// unknown id rather than run with another adapter. An unloaded adapter's
// weights are freed once no live request runs with it, at the next Load
// or Unload after that. A Registry is safe for concurrent use.
type Registry struct {
	cfg     *model.Config
	maxRank int
	install func(id int, a *Adapter) error // the executor's
	release func(id int) bool              // frees id unless a live request runs with it, at once

	mu      sync.Mutex
	byName  map[string]int // loaded adapters; reserved names map to 0
	entries []*Adapter     // by id − 1; nil once unloaded
	retired []int          // unloaded ids whose weights are still installed
}

// NewRegistry returns the registry of adapters, which are installed as
// ids 1, 2, … already; reserved are names no adapter may take (the
// model's). Later adapters are loaded for a model of config cfg with
// ranks up to maxRank (0: any) and installed with install; release
// frees an unloaded adapter's id, reporting false, freeing nothing, while
// a live request runs with it (the check and the free must be one step
// against new requests: engine.Engine.FreeAdapter).
func NewRegistry(cfg *model.Config, maxRank int, install func(id int, a *Adapter) error, release func(id int) bool, reserved []string, adapters []*Adapter) *Registry {
	r := &Registry{cfg: cfg, maxRank: maxRank, install: install, release: release, byName: map[string]int{}, entries: adapters}
	for _, n := range reserved {
		r.byName[n] = 0
	}
	for i, a := range adapters {
		r.byName[a.Name] = i + 1
	}
	return r
}

// Lookup is the id of the loaded adapter called name.
func (r *Registry) Lookup(name string) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.byName[name]
	return id, ok && id > 0
}

// Name is adapter id's name, "" once unloaded.
func (r *Registry) Name(id int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id < 1 || id > len(r.entries) || r.entries[id-1] == nil {
		return ""
	}
	return r.entries[id-1].Name
}

// List is the loaded adapters, in the order they were loaded.
func (r *Registry) List() []*Adapter {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Adapter
	for _, a := range r.entries {
		if a != nil {
			out = append(out, a)
		}
	}
	return out
}

// Load reads the adapter in dir and installs it under a new id as name.
func (r *Registry) Load(name, dir string) (*Adapter, error) {
	if name == "" || dir == "" {
		return nil, errors.New("lora: an adapter needs a name and a path")
	}
	r.mu.Lock()
	_, taken := r.byName[name]
	r.mu.Unlock()
	if taken {
		return nil, fmt.Errorf("%w: %q", ErrExists, name)
	}
	a, err := Load(name, dir, r.cfg, r.maxRank) // outside the lock: it reads files
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep()
	if _, taken := r.byName[name]; taken { // loaded meanwhile
		return nil, fmt.Errorf("%w: %q", ErrExists, name)
	}
	id := len(r.entries) + 1
	if err := r.install(id, a); err != nil {
		return nil, err
	}
	r.entries = append(r.entries, a)
	r.byName[name] = id
	return a, nil
}

// Unload stops serving the adapter called name: new requests no longer
// find it, and its weights are freed once its last request has ended.
func (r *Registry) Unload(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.byName[name]
	if !ok || id == 0 {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	delete(r.byName, name)
	r.entries[id-1] = nil
	r.retired = append(r.retired, id)
	r.sweep()
	return nil
}

// sweep frees the retired ids no live request runs with. Called with mu
// held.
func (r *Registry) sweep() {
	kept := r.retired[:0]
	for _, id := range r.retired {
		if !r.release(id) {
			kept = append(kept, id)
		}
	}
	r.retired = kept
}
