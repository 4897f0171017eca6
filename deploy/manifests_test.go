// Package deploy holds Gearbox's Kubernetes manifests. Its test decodes
// every manifest strictly into the Kubernetes API types (unknown or
// misspelt fields fail) and checks that the pieces agree with each other
// and with the server: probes on /health, the Service and the
// InferencePool selecting the Deployment's pods on its serving port.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// inferencePool is the Gateway API Inference Extension's
// inference.networking.k8s.io/v1 InferencePool (its api/v1
// inferencepool_types.go; the module is not served by the Go proxy this
// project builds from), the fields a manifest may set.
type inferencePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		TargetPorts []struct {
			Number int32 `json:"number"`
		} `json:"targetPorts"`
		EndpointPickerRef struct {
			Group *string `json:"group,omitempty"`
			Kind  string  `json:"kind,omitempty"`
			Name  string  `json:"name"`
			Port  *struct {
				Number int32 `json:"number"`
			} `json:"port,omitempty"`
			FailureMode string `json:"failureMode,omitempty"`
		} `json:"endpointPickerRef"`
	} `json:"spec"`
}

// objects reads every YAML document of the manifests into its type by kind.
func objects(t *testing.T) (deps []appsv1.Deployment, svcs []corev1.Service, pools []inferencePool) {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			strict := func(v any) {
				if err := yaml.UnmarshalStrict(doc, v); err != nil {
					t.Fatalf("%s document %d (%s): %v", f, i, meta.Kind, err)
				}
			}
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 Deployment":
				var d appsv1.Deployment
				strict(&d)
				deps = append(deps, d)
			case "v1 Service":
				var s corev1.Service
				strict(&s)
				svcs = append(svcs, s)
			case "inference.networking.k8s.io/v1 InferencePool":
				var p inferencePool
				strict(&p)
				pools = append(pools, p)
			default:
				t.Fatalf("%s document %d: unexpected %s %s", f, i, meta.APIVersion, meta.Kind)
			}
		}
	}
	return deps, svcs, pools
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range strings.Split(string(doc), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") && t != "---" {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}

func TestManifests(t *testing.T) {
	deps, svcs, pools := objects(t)
	if len(deps) != 1 || len(svcs) != 1 || len(pools) != 1 {
		t.Fatalf("%d Deployments, %d Services, %d InferencePools; want one each", len(deps), len(svcs), len(pools))
	}
	d, svc, pool := deps[0], svcs[0], pools[0]
	labels := d.Spec.Template.Labels
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(k8slabels.Set(labels)) {
		t.Fatalf("the Deployment's selector %v does not select its pods %v (%v)", d.Spec.Selector, labels, err)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(d.Spec.Template.Spec.Containers))
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "serve" || !slices.Contains(c.Args, "--host=0.0.0.0") {
		t.Fatalf("container args %v: want gearbox serve listening on every address", c.Args)
	}
	port := int32(0)
	for _, p := range c.Ports {
		if p.Name == "http" {
			port = p.ContainerPort
		}
	}
	if port == 0 || !slices.Contains(c.Args, "--port="+strconv.Itoa(int(port))) {
		t.Fatalf("container port %d and args %v disagree", port, c.Args)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.HTTPGet.Port.String() != "http" {
			t.Fatalf("%s probe %+v: want GET /health on the http port", name, p)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Fatalf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
	}
	for _, m := range c.VolumeMounts {
		found := false
		for _, v := range d.Spec.Template.Spec.Volumes {
			found = found || v.Name == m.Name
		}
		if !found {
			t.Fatalf("volume mount %s has no volume", m.Name)
		}
	}
	if !maps.Equal(svc.Spec.Selector, labels) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Fatalf("Service selector %v / ports %+v: want the Deployment's pods on its http port", svc.Spec.Selector, svc.Spec.Ports)
	}
	ps := pool.Spec
	if !maps.Equal(ps.Selector.MatchLabels, labels) {
		t.Fatalf("InferencePool selects %v, the pods are labelled %v", ps.Selector.MatchLabels, labels)
	}
	if len(ps.TargetPorts) != 1 || ps.TargetPorts[0].Number != port {
		t.Fatalf("InferencePool targetPorts %+v, want exactly the serving port %d", ps.TargetPorts, port)
	}
	ref := ps.EndpointPickerRef
	if ref.Name == "" || (ref.Kind == "" || ref.Kind == "Service") && (ref.Port == nil || ref.Port.Number < 1 || ref.Port.Number > 65535) {
		t.Fatalf("endpointPickerRef %+v: a Service reference needs a name and a port", ref)
	}
	if ref.FailureMode != "" && ref.FailureMode != "FailOpen" && ref.FailureMode != "FailClose" {
		t.Fatalf("endpointPickerRef failureMode %q: FailOpen or FailClose", ref.FailureMode)
	}
}

// TestStrictDecodingCatchesTypos: the check above would notice a misspelt
// field.
func TestStrictDecodingCatchesTypos(t *testing.T) {
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict([]byte("apiVersion: apps/v1\nkind: Deployment\nspec:\n  replica: 2\n"), &d); err == nil {
		t.Fatal("a misspelt field decoded without error")
	}
}
