// Package kubernetes holds the Kubernetes manifests of docs/operations.md
// §4 (*.yaml here) and their test: every document decodes strictly into
// its k8s.io/api type (an unknown or misspelt field, a duplicate key, a
// kind not listed fails), and what the documents say of each other holds
// (the probes hit the metrics port the config listens on, the Services
// target ports the sidecar container names, the config loads).
package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-dev/sidecar/config"
)

// newObject returns the typed object of an apiVersion and kind, or nil
// for one this test does not know (which fails it).
func newObject(tm metav1.TypeMeta) any {
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/Secret":
		return &corev1.Secret{}
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "v1/Service":
		return &corev1.Service{}
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}
	case "networking.k8s.io/v1/NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "networking.k8s.io/v1/Ingress":
		return &networkingv1.Ingress{}
	}
	return nil
}

// docSep splits a multi-document YAML stream.
var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeStrict decodes every document of src into its typed object:
// unknown fields and duplicate keys are errors (yaml.UnmarshalStrict:
// YAML to JSON strictly, then DisallowUnknownFields).
func decodeStrict(src []byte) ([]any, error) {
	var objs []any
	for i, doc := range docSep.Split(string(src), -1) {
		if len(bytes.TrimSpace(stripComments([]byte(doc)))) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return nil, fmt.Errorf("document %d: %v", i+1, err)
		}
		obj := newObject(tm)
		if obj == nil {
			return nil, fmt.Errorf("document %d: apiVersion %q kind %q is not one this test decodes", i+1, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return nil, fmt.Errorf("document %d (%s): %v", i+1, tm.Kind, err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

func stripComments(b []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(append(out, line...), '\n')
		}
	}
	return out
}

// A typo, a duplicate key, a value of the wrong type and an unknown kind
// are each refused: the decoder is strict.
func TestDecodeStrictRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  prots: []\n",
		"duplicate key": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nmetadata: {name: y}\n",
		"wrong type":    "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports: 4433\n",
		"unknown kind":  "apiVersion: v1\nkind: Servise\nmetadata: {name: x}\n",
		"probe typo":    "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers:\n        - name: a\n          readinessProbe:\n            httpGet: {pth: /readyz, port: 9464}\n",
	} {
		if _, err := decodeStrict([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
	objs, err := decodeStrict([]byte("# a comment\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: x}\nstringData: {token: t}\n"))
	if err != nil || len(objs) != 1 {
		t.Errorf("a valid document: %d objects, %v", len(objs), err)
	}
}

// TestManifests decodes every manifest here strictly and checks that
// they fit together and with the daemon.
func TestManifests(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var (
		secrets   = map[string]*corev1.Secret{}
		configs   = map[string]*corev1.ConfigMap{}
		services  []*corev1.Service
		sets      []*appsv1.StatefulSet
		policies  []*networkingv1.NetworkPolicy
		ingresses []*networkingv1.Ingress
	)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeStrict(src)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, o := range objs {
			switch o := o.(type) {
			case *corev1.Secret:
				secrets[o.Name] = o
			case *corev1.ConfigMap:
				configs[o.Name] = o
			case *corev1.Service:
				services = append(services, o)
			case *appsv1.StatefulSet:
				sets = append(sets, o)
			case *networkingv1.NetworkPolicy:
				policies = append(policies, o)
			case *networkingv1.Ingress:
				ingresses = append(ingresses, o)
			}
		}
	}
	if len(sets) != 1 || len(secrets) == 0 || len(configs) == 0 || len(services) == 0 || len(policies) == 0 || len(ingresses) == 0 {
		t.Fatalf("want a StatefulSet, a Secret, a ConfigMap, Services, a NetworkPolicy and an Ingress; got %d, %d, %d, %d, %d, %d",
			len(sets), len(secrets), len(configs), len(services), len(policies), len(ingresses))
	}
	ss := sets[0]
	pod := ss.Spec.Template.Spec
	var sc *corev1.Container
	for i := range pod.Containers {
		if pod.Containers[i].Name == "sidecar" {
			sc = &pod.Containers[i]
		}
	}
	if sc == nil {
		t.Fatal("no container named sidecar")
	}
	if pod.ShareProcessNamespace == nil || !*pod.ShareProcessNamespace {
		t.Error("shareProcessNamespace is not true: the sidecar would not see the application's processes")
	}

	// The sidecar's named ports.
	ports := map[string]corev1.ContainerPort{}
	for _, p := range sc.Ports {
		ports[p.Name] = p
	}
	want := map[string]corev1.ContainerPort{
		"https":        {Name: "https", ContainerPort: 4433, Protocol: corev1.ProtocolTCP},
		"webtransport": {Name: "webtransport", ContainerPort: 4433, Protocol: corev1.ProtocolUDP},
		"metrics":      {Name: "metrics", ContainerPort: 9464, Protocol: corev1.ProtocolTCP},
	}
	for name, w := range want {
		if ports[name] != w {
			t.Errorf("sidecar port %s = %+v, want %+v", name, ports[name], w)
		}
	}

	// Probes: /healthz and /readyz on the metrics port.
	for name, p := range map[string]*corev1.Probe{"liveness": sc.LivenessProbe, "readiness": sc.ReadinessProbe} {
		path := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[name]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe %+v, want httpGet %s on port metrics", name, p, path)
		}
	}

	// Resources: requests and limits set, requests within limits.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okr := sc.Resources.Requests[r]
		lim, okl := sc.Resources.Limits[r]
		if !okr || !okl || req.Cmp(lim) > 0 {
			t.Errorf("sidecar %s: request %v (%v), limit %v (%v)", r, req.String(), okr, lim.String(), okl)
		}
	}

	// Security: non-root, read-only root, no privilege escalation.
	sec := sc.SecurityContext
	if sec == nil || sec.RunAsUser == nil || *sec.RunAsUser != 10001 || sec.ReadOnlyRootFilesystem == nil || !*sec.ReadOnlyRootFilesystem ||
		sec.AllowPrivilegeEscalation == nil || *sec.AllowPrivilegeEscalation {
		t.Errorf("sidecar securityContext %+v: want user 10001, read-only root, no privilege escalation", sec)
	}

	// The config it mounts loads with the daemon's own loader, and agrees.
	var cfgMap, tokenSecret, tokenDir string
	mounts := map[string]string{}
	for _, m := range sc.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	for _, v := range pod.Volumes {
		switch {
		case v.ConfigMap != nil:
			cfgMap = v.ConfigMap.Name
		case v.Secret != nil:
			tokenSecret, tokenDir = v.Secret.SecretName, mounts[v.Name]
		}
	}
	cm, ok := configs[cfgMap]
	if !ok {
		t.Fatalf("the pod mounts ConfigMap %q, not among the manifests", cfgMap)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.hcl")
	// token_file is checked when the token is resolved, not by Load.
	if err := os.WriteFile(cfgFile, []byte(cm.Data["config.hcl"]), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgFile)
	if err != nil {
		t.Fatalf("the ConfigMap's config.hcl: %v", err)
	}
	if cfg.Metrics.Listen != "0.0.0.0:9464" || cfg.Listener.Address != "0.0.0.0:4433" {
		t.Errorf("config listens on %s, metrics %s; want the container ports 4433 and 9464", cfg.Listener.Address, cfg.Metrics.Listen)
	}
	if o, err := cfg.ResolveHostOrdinal(ss.Name + "-1"); err != nil || o != 1 {
		t.Errorf("host ordinal of pod %s-1: %d, %v; want 1 (listener.host_ordinal = -1)", ss.Name, o, err)
	}
	if s, ok := secrets[tokenSecret]; !ok || s.StringData["token"] == "" ||
		cfg.Auth.TokenFile != filepath.Join(tokenDir, "token") {
		t.Errorf("token: Secret %q (found %v) mounted at %q, config reads %q", tokenSecret, ok, tokenDir, cfg.Auth.TokenFile)
	}
	if mounts["config"] != "/etc/sidecar/config.hcl" || mounts["state"] != cfg.StateDir || mounts["tmp"] != "/tmp" {
		t.Errorf("mounts %v: want the config at /etc/sidecar/config.hcl, state at %s, /tmp", mounts, cfg.StateDir)
	}
	// SIGTERM: drain_delay, then at most 10 s for the clients, within the grace.
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	if need := cfg.Listener.DrainDelay + 10*time.Second; grace <= need {
		t.Errorf("terminationGracePeriodSeconds %v is not above drain_delay + 10 s (%v)", grace, need)
	}

	// Services: TCP and UDP, to ports the sidecar names, selecting the pod.
	labels := ss.Spec.Template.Labels
	for _, s := range services {
		protos := map[corev1.Protocol]bool{}
		for _, p := range s.Spec.Ports {
			protos[p.Protocol] = true
			if _, ok := ports[p.TargetPort.String()]; !ok || ports[p.TargetPort.String()].Protocol != p.Protocol {
				t.Errorf("Service %s port %s targets %q (%s), not a sidecar port of that protocol", s.Name, p.Name, p.TargetPort.String(), p.Protocol)
			}
		}
		for k, v := range s.Spec.Selector {
			if labels[k] != v && k != "statefulset.kubernetes.io/pod-name" {
				t.Errorf("Service %s selects %s=%s, which the pods do not carry", s.Name, k, v)
			}
		}
		if s.Name == ss.Spec.ServiceName && (!protos[corev1.ProtocolTCP] || !protos[corev1.ProtocolUDP]) {
			t.Errorf("Service %s: protocols %v, want TCP and UDP", s.Name, protos)
		}
	}
	if !slices.ContainsFunc(services, func(s *corev1.Service) bool { return s.Name == ss.Spec.ServiceName }) {
		t.Errorf("the StatefulSet's serviceName %q is no Service here", ss.Spec.ServiceName)
	}

	// NetworkPolicy: selects the pods, lets in 4433 TCP and UDP and 9464.
	np := policies[0]
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if labels[k] != v {
			t.Errorf("NetworkPolicy selects %s=%s, which the pods do not carry", k, v)
		}
	}
	var allowed []string
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			allowed = append(allowed, fmt.Sprintf("%s/%s", p.Port.String(), *p.Protocol))
		}
	}
	slices.Sort(allowed)
	if got := strings.Join(allowed, " "); got != "4433/TCP 4433/UDP 9464/TCP" {
		t.Errorf("NetworkPolicy lets in %s, want 4433/TCP 4433/UDP 9464/TCP", got)
	}
}

// The image's own config.hcl (deploy/image) loads, and listens where the
// Containerfile's EXPOSE and the manifests' ports say.
func TestImageConfig(t *testing.T) {
	cfg, err := config.Load("../image/config.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listener.Address != "0.0.0.0:4433" || cfg.Metrics.Listen != "0.0.0.0:9464" || cfg.StateDir != "/var/lib/sidecar" {
		t.Errorf("image config: listen %s, metrics %s, state %s", cfg.Listener.Address, cfg.Metrics.Listen, cfg.StateDir)
	}
	cf, err := os.ReadFile("../../Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"EXPOSE 4433/tcp 4433/udp 9464/tcp", `VOLUME ["/var/lib/sidecar"]`, "USER 10001:10001", "FROM scratch"} {
		if !strings.Contains(string(cf), want) {
			t.Errorf("Containerfile has no %q", want)
		}
	}
}
