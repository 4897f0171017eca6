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
	"k8s.io/apimachinery/pkg/util/intstr"
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

// leaderWorkerSet is LeaderWorkerSet's leaderworkerset.x-k8s.io/v1
// LeaderWorkerSet (its api/leaderworkerset/v1/leaderworkerset_types.go;
// sigs.k8s.io/lws is not served by the Go proxy this project builds from),
// every field of its spec.
type leaderWorkerSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Replicas             *int32 `json:"replicas,omitempty"`
		LeaderWorkerTemplate struct {
			LeaderTemplate *corev1.PodTemplateSpec `json:"leaderTemplate,omitempty"`
			WorkerTemplate corev1.PodTemplateSpec  `json:"workerTemplate"`
			Size           *int32                  `json:"size,omitempty"`
			RestartPolicy  string                  `json:"restartPolicy,omitempty"`
			SubGroupPolicy *struct {
				Type         *string `json:"subGroupPolicyType,omitempty"`
				SubGroupSize *int32  `json:"subGroupSize,omitempty"`
			} `json:"subGroupPolicy,omitempty"`
			VolumeClaimTemplates                 []corev1.PersistentVolumeClaim                          `json:"volumeClaimTemplates,omitempty"`
			PersistentVolumeClaimRetentionPolicy *appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy `json:"persistentVolumeClaimRetentionPolicy,omitempty"`
		} `json:"leaderWorkerTemplate"`
		RolloutStrategy struct {
			Type                       string `json:"type"`
			RollingUpdateConfiguration *struct {
				Partition      *int32             `json:"partition,omitempty"`
				MaxUnavailable intstr.IntOrString `json:"maxUnavailable,omitempty"`
				MaxSurge       intstr.IntOrString `json:"maxSurge,omitempty"`
			} `json:"rollingUpdateConfiguration,omitempty"`
		} `json:"rolloutStrategy,omitempty"`
		StartupPolicy string `json:"startupPolicy,omitempty"`
		NetworkConfig *struct {
			SubdomainPolicy *string `json:"subdomainPolicy"`
		} `json:"networkConfig,omitempty"`
	} `json:"spec"`
}

// The labels LeaderWorkerSet puts on every pod of a group.
const (
	lwsWorkerIndexLabel = "leaderworkerset.sigs.k8s.io/worker-index"
	lwsNameLabel        = "leaderworkerset.sigs.k8s.io/name"
)

// manifest is the objects of one manifest file, by kind.
type manifest struct {
	deps  []appsv1.Deployment
	lwss  []leaderWorkerSet
	svcs  []corev1.Service
	pools []inferencePool
}

// TestManifestFiles: every manifest file is one this test checks.
func TestManifestFiles(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"gearbox-lws.yaml", "gearbox.yaml"}; !slices.Equal(files, want) {
		t.Fatalf("manifests %v, the tests check %v", files, want)
	}
}

// objects reads every YAML document of manifest file f into its type by
// kind.
func objects(t *testing.T, f string) (m manifest) {
	t.Helper()
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
			m.deps = append(m.deps, d)
		case "leaderworkerset.x-k8s.io/v1 LeaderWorkerSet":
			var l leaderWorkerSet
			strict(&l)
			m.lwss = append(m.lwss, l)
		case "v1 Service":
			var s corev1.Service
			strict(&s)
			m.svcs = append(m.svcs, s)
		case "inference.networking.k8s.io/v1 InferencePool":
			var p inferencePool
			strict(&p)
			m.pools = append(m.pools, p)
		default:
			t.Fatalf("%s document %d: unexpected %s %s", f, i, meta.APIVersion, meta.Kind)
		}
	}
	return m
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

// TestManifests checks the single-host engines of gearbox.yaml: a
// Deployment of gearbox serve pods, a Service and an InferencePool that
// select them on the serving port.
func TestManifests(t *testing.T) {
	m := objects(t, "gearbox.yaml")
	if len(m.deps) != 1 || len(m.lwss) != 0 || len(m.svcs) != 1 || len(m.pools) != 1 {
		t.Fatalf("%d Deployments, %d LeaderWorkerSets, %d Services, %d InferencePools; want one Deployment, Service and InferencePool",
			len(m.deps), len(m.lwss), len(m.svcs), len(m.pools))
	}
	d := m.deps[0]
	labels := d.Spec.Template.Labels
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(k8slabels.Set(labels)) {
		t.Fatalf("the Deployment's selector %v does not select its pods %v (%v)", d.Spec.Selector, labels, err)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(d.Spec.Template.Spec.Containers))
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("container args %v: want gearbox serve", c.Args)
	}
	port := checkServer(t, c, d.Spec.Template.Spec)
	checkRouting(t, m.svcs[0], m.pools[0], labels, nil, port)
}

// TestLeaderWorkerSet checks the multi-host engines of gearbox-lws.yaml:
// groups of size pods whose leader runs gearbox serve --transport mpi as
// an mpirun job over ssh to the workers' sshd, restarted as a group, and
// a Service and an InferencePool that select the leaders only.
func TestLeaderWorkerSet(t *testing.T) {
	m := objects(t, "gearbox-lws.yaml")
	if len(m.deps) != 0 || len(m.lwss) != 1 || len(m.svcs) != 1 || len(m.pools) != 1 {
		t.Fatalf("%d Deployments, %d LeaderWorkerSets, %d Services, %d InferencePools; want one LeaderWorkerSet, Service and InferencePool",
			len(m.deps), len(m.lwss), len(m.svcs), len(m.pools))
	}
	spec := m.lwss[0].Spec
	tmpl := spec.LeaderWorkerTemplate
	if tmpl.Size == nil || *tmpl.Size < 2 {
		t.Fatalf("group size %v: want at least a leader and a worker", tmpl.Size)
	}
	size := int(*tmpl.Size)
	if tmpl.RestartPolicy != "RecreateGroupOnPodRestart" {
		t.Fatalf("restartPolicy %q: a dead rank ends the job, so the group must be recreated (RecreateGroupOnPodRestart)", tmpl.RestartPolicy)
	}
	if p := spec.StartupPolicy; p != "" && p != "LeaderCreated" && p != "LeaderReady" {
		t.Fatalf("startupPolicy %q: LeaderCreated or LeaderReady", p)
	}
	if r := spec.RolloutStrategy.Type; r != "" && r != "RollingUpdate" {
		t.Fatalf("rolloutStrategy type %q: RollingUpdate", r)
	}
	if tmpl.LeaderTemplate == nil || len(tmpl.LeaderTemplate.Spec.Containers) != 1 || len(tmpl.WorkerTemplate.Spec.Containers) != 1 {
		t.Fatal("want a leader template and a worker template of one container each")
	}
	leader, worker := tmpl.LeaderTemplate.Spec.Containers[0], tmpl.WorkerTemplate.Spec.Containers[0]

	// The leader: gearbox-mpi-leader, whose arguments go to gearbox serve,
	// over a plan of one rank per pod.
	if !slices.Equal(leader.Command, []string{"/usr/local/bin/gearbox-mpi-leader"}) {
		t.Fatalf("leader command %v: want the image's gearbox-mpi-leader", leader.Command)
	}
	if ranks := planRanks(t, leader.Args); ranks != size {
		t.Fatalf("the leader's --plan has %d ranks, the group %d pods: one rank process per pod", ranks, size)
	}
	if slices.ContainsFunc(leader.Args, func(a string) bool { return strings.HasPrefix(a, "--transport") }) {
		t.Fatalf("leader args %v: gearbox-mpi-leader sets --transport mpi itself", leader.Args)
	}
	port := checkServer(t, leader, tmpl.LeaderTemplate.Spec)

	// The workers: sshd on the port the leader's ssh uses, and the same
	// model and key volumes, since their rank processes load the model.
	sshPort := "2222"
	for _, e := range leader.Env {
		if e.Name == "GEARBOX_SSH_PORT" {
			sshPort = e.Value
		}
	}
	cmd := strings.Join(worker.Command, " ")
	if !strings.Contains(cmd, "sshd -D") || !strings.Contains(cmd, "-p "+sshPort+" ") {
		t.Fatalf("worker command %q: want sshd in the foreground on port %s", cmd, sshPort)
	}
	if len(worker.Ports) != 1 || strconv.Itoa(int(worker.Ports[0].ContainerPort)) != sshPort ||
		worker.ReadinessProbe == nil || worker.ReadinessProbe.TCPSocket == nil || worker.ReadinessProbe.TCPSocket.Port.String() != worker.Ports[0].Name {
		t.Fatalf("worker ports %+v, readiness %+v: want the sshd port, probed", worker.Ports, worker.ReadinessProbe)
	}
	checkResources(t, worker)
	checkVolumes(t, worker, tmpl.WorkerTemplate.Spec)
	for _, c := range []corev1.Container{leader, worker} {
		mounts := map[string]string{}
		for _, v := range c.VolumeMounts {
			mounts[v.MountPath] = v.Name
		}
		if mounts["/root/.ssh"] == "" || mounts["/models/model"] == "" {
			t.Fatalf("%s mounts %v: want the ssh keys at /root/.ssh and the model at /models/model", c.Name, mounts)
		}
	}

	// Routing: the leaders (worker index 0) only.
	leaderLabels := maps.Clone(tmpl.LeaderTemplate.Labels)
	workerLabels := maps.Clone(tmpl.WorkerTemplate.Labels)
	for _, l := range []map[string]string{leaderLabels, workerLabels} {
		l[lwsNameLabel] = m.lwss[0].Name
	}
	leaderLabels[lwsWorkerIndexLabel], workerLabels[lwsWorkerIndexLabel] = "0", "1"
	checkRouting(t, m.svcs[0], m.pools[0], leaderLabels, workerLabels, port)
}

// planRanks is the number of ranks of the --plan in args (DP·PP·SP·TP).
func planRanks(t *testing.T, args []string) int {
	t.Helper()
	for _, a := range args {
		plan, ok := strings.CutPrefix(a, "--plan=")
		if !ok {
			continue
		}
		n := 1
		for kv := range strings.SplitSeq(plan, ",") {
			_, v, _ := strings.Cut(kv, "=")
			d, err := strconv.Atoi(v)
			if err != nil || d < 1 {
				t.Fatalf("--plan=%s: %q is not a degree", plan, kv)
			}
			n *= d
		}
		return n
	}
	t.Fatalf("args %v have no --plan", args)
	return 0
}

// checkServer checks a gearbox serve container of a pod: listening on
// every address on its declared http port, probes on /health, resources,
// volumes. It returns the port.
func checkServer(t *testing.T, c corev1.Container, pod corev1.PodSpec) int32 {
	t.Helper()
	if !slices.Contains(c.Args, "--host=0.0.0.0") {
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
	checkResources(t, c)
	checkVolumes(t, c, pod)
	return port
}

func checkResources(t *testing.T, c corev1.Container) {
	t.Helper()
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Fatalf("%s resources %+v: want CPU and memory requests and a memory limit", c.Name, c.Resources)
	}
}

// checkVolumes: every volume mount of c has a volume in its pod.
func checkVolumes(t *testing.T, c corev1.Container, pod corev1.PodSpec) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
			t.Fatalf("%s: volume mount %s has no volume", c.Name, m.Name)
		}
	}
}

// checkRouting checks that svc and pool select the pods labelled serving
// on their http port (port) and not those labelled other (nil: none).
func checkRouting(t *testing.T, svc corev1.Service, pool inferencePool, serving, other map[string]string, port int32) {
	t.Helper()
	svcSel := k8slabels.SelectorFromSet(svc.Spec.Selector)
	if svcSel.Empty() || !svcSel.Matches(k8slabels.Set(serving)) || other != nil && svcSel.Matches(k8slabels.Set(other)) {
		t.Fatalf("Service selector %v: want the serving pods %v and not %v", svc.Spec.Selector, serving, other)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Fatalf("Service ports %+v: want the pods' http port", svc.Spec.Ports)
	}
	ps := pool.Spec
	poolSel := k8slabels.SelectorFromSet(ps.Selector.MatchLabels)
	if poolSel.Empty() || !poolSel.Matches(k8slabels.Set(serving)) || other != nil && poolSel.Matches(k8slabels.Set(other)) {
		t.Fatalf("InferencePool selects %v: want the serving pods %v and not %v", ps.Selector.MatchLabels, serving, other)
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
