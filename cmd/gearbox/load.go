package main

import (
	"fmt"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
)

// loadModel loads dir, or the built-in default model when dir is empty,
// with opts.
func loadModel(dir string, opts model.Options) (*model.Model, error) {
	if dir == "" {
		return model.LoadFSOptions(builtin.FS(), builtin.Name, opts)
	}
	m, err := model.Load(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", dir, err)
	}
	return m, nil
}
