package main

import (
	"fmt"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
)

// loadModel loads dir, or the built-in default model when dir is empty.
func loadModel(dir string) (*model.Model, error) {
	if dir == "" {
		return model.LoadFS(builtin.FS(), builtin.Name)
	}
	m, err := model.Load(dir, model.Options{})
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", dir, err)
	}
	return m, nil
}
