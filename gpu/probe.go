package gpu

import "fmt"

// Prober finds and loads the CUDA driver library.
type Prober interface {
	// ProbeDriver returns the path of the driver library it loaded, or an
	// error saying why none could be loaded (wrapping ErrNotFound when no
	// file was found).
	ProbeDriver() (path string, err error)
}

// SystemProber searches the host with Search(Driver, Env) and loads the
// file it finds with Open.
type SystemProber struct {
	Env SearchEnv
	// Open loads a shared library; nil means dlopen with RTLD_NOW|RTLD_GLOBAL.
	Open func(path string) error
}

// NewSystemProber probes the running host.
func NewSystemProber() SystemProber { return SystemProber{Env: OSEnv()} }

// ProbeDriver implements Prober.
func (p SystemProber) ProbeDriver() (string, error) {
	path, _, err := Search(Driver, p.Env)
	if err != nil {
		return "", err
	}
	open := p.Open
	if open == nil {
		open = dlopen
	}
	if err := open(path); err != nil {
		return "", fmt.Errorf("gpu: load %s %s: %w", Driver.Name, path, err)
	}
	return path, nil
}
