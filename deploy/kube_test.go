package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/redrive/redrive/internal/config"
)

// objects is one kustomize build, decoded.
type objects struct {
	deployments     map[string]*appsv1.Deployment
	services        map[string]*corev1.Service
	configMaps      map[string]*corev1.ConfigMap
	namespaces      map[string]*corev1.Namespace
	pdbs            map[string]*policyv1.PodDisruptionBudget
	serviceMonitors map[string]*monitoringv1.ServiceMonitor
	rules           map[string]*monitoringv1.PrometheusRule
	scaledObjects   map[string]*scaledObject
	triggerAuths    map[string]*triggerAuthentication
	netPolicies     map[string]*networkingv1.NetworkPolicy
}

// build runs kustomize (in process) on dir and decodes every object
// strictly: an unknown or misspelt field is an error.
func build(t *testing.T, dir string) *objects {
	t.Helper()
	return buildFS(t, filesys.MakeFsOnDisk(), dir)
}

// buildFS is build on fsys.
func buildFS(t *testing.T, fsys filesys.FileSystem, dir string) *objects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(fsys, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	o := &objects{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, namespaces: map[string]*corev1.Namespace{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, serviceMonitors: map[string]*monitoringv1.ServiceMonitor{},
		rules: map[string]*monitoringv1.PrometheusRule{}, scaledObjects: map[string]*scaledObject{},
		triggerAuths: map[string]*triggerAuthentication{}, netPolicies: map[string]*networkingv1.NetworkPolicy{},
	}
	if len(rm.Resources()) == 0 {
		t.Fatalf("kustomize build %s: no objects", dir)
	}
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: %v", r.CurId(), err)
		}
		apiVersion, kind, name := r.GetApiVersion(), r.GetKind(), r.GetName()
		var target any
		switch apiVersion + " " + kind {
		case "apps/v1 Deployment":
			v := &appsv1.Deployment{}
			o.deployments[name], target = v, v
		case "v1 Service":
			v := &corev1.Service{}
			o.services[name], target = v, v
		case "v1 ConfigMap":
			v := &corev1.ConfigMap{}
			o.configMaps[name], target = v, v
		case "v1 Namespace":
			v := &corev1.Namespace{}
			o.namespaces[name], target = v, v
		case "policy/v1 PodDisruptionBudget":
			v := &policyv1.PodDisruptionBudget{}
			o.pdbs[name], target = v, v
		case "monitoring.coreos.com/v1 ServiceMonitor":
			v := &monitoringv1.ServiceMonitor{}
			o.serviceMonitors[name], target = v, v
		case "monitoring.coreos.com/v1 PrometheusRule":
			v := &monitoringv1.PrometheusRule{}
			o.rules[name], target = v, v
		case "keda.sh/v1alpha1 ScaledObject":
			v := &scaledObject{}
			o.scaledObjects[name], target = v, v
		case "networking.k8s.io/v1 NetworkPolicy":
			v := &networkingv1.NetworkPolicy{}
			o.netPolicies[name], target = v, v
		case "keda.sh/v1alpha1 TriggerAuthentication":
			v := &triggerAuthentication{}
			o.triggerAuths[name], target = v, v
		default:
			t.Errorf("%s: %s %s is not a kind these tests know; add its type", dir, apiVersion, kind)
			continue
		}
		if err := sigsyaml.UnmarshalStrict(y, target); err != nil {
			t.Errorf("%s: %s %s does not decode strictly: %v\n%s", dir, kind, name, err, y)
		}
	}
	return o
}

func kubeDir(t *testing.T, rel string) string {
	return filepath.Join(repoRoot(t), "deploy", "kubernetes", rel)
}

func TestKustomizeBase(t *testing.T) {
	o := build(t, kubeDir(t, "base"))
	checkCommon(t, "base", o)
	if len(o.scaledObjects) != 0 {
		t.Errorf("base: ScaledObject belongs in an overlay (KEDA is optional)")
	}
	if p := o.deployments["redrive-processor"]; p != nil && (p.Spec.Replicas == nil || *p.Spec.Replicas < 2) {
		t.Errorf("base: processor replicas %v, want at least 2", p.Spec.Replicas)
	}
	// The processors serve the callback intake (redrive process does when
	// a pipeline has handler.callback); the component moves it.
	if _, ok := o.deployments["redrive-callbacks"]; ok {
		t.Errorf("base: a Deployment redrive-callbacks: it exits without a pipeline with handler.callback; it belongs in components/callbacks")
	}
	if s := o.services["redrive-callbacks"]; s != nil && !labelsMatch(s.Spec.Selector, o.deployments["redrive-processor"].Spec.Template.Labels) {
		t.Errorf("base: Service redrive-callbacks selects %v, want the processors", s.Spec.Selector)
	}
}

func TestKustomizeExampleOverlay(t *testing.T) {
	o := build(t, kubeDir(t, "overlays/example"))
	c := checkCommon(t, "overlay", o)
	if _, ok := o.namespaces["redrive"]; !ok {
		t.Errorf("overlay: no Namespace redrive")
	}
	for _, d := range o.deployments {
		if d.Namespace != "redrive" {
			t.Errorf("overlay: Deployment %s in namespace %q", d.Name, d.Namespace)
		}
		img := d.Spec.Template.Spec.Containers[0].Image
		if img != "registry.example.com/redrive:0.1.0" {
			t.Errorf("overlay: Deployment %s image %q", d.Name, img)
		}
	}
	if p := o.deployments["redrive-processor"]; p != nil && p.Spec.Replicas != nil {
		t.Errorf("overlay: processor replicas %d set: KEDA owns them, the field must be absent", *p.Spec.Replicas)
	}
	if len(o.scaledObjects) != 1 {
		t.Fatalf("overlay: %d ScaledObjects, want 1", len(o.scaledObjects))
	}
	for _, so := range o.scaledObjects {
		checkScaledObject(t, so, c, o)
	}

	// The callback intake runs apart (components/callbacks): the public
	// Service sends to it only, its metrics are scraped, drains are
	// bounded, and the config has a callback for it to serve.
	if !c.HasCallbacks() {
		t.Errorf("overlay: no pipeline has handler.callback, yet redrive callbacks runs (it exits 2 without one)")
	}
	cb := o.deployments["redrive-callbacks"]
	if cb == nil {
		t.Fatalf("overlay: no Deployment redrive-callbacks (components/callbacks)")
	}
	if cb.Spec.Replicas == nil || *cb.Spec.Replicas < 2 {
		t.Errorf("overlay: redrive-callbacks replicas %v, want at least 2 (a public endpoint)", cb.Spec.Replicas)
	}
	if s := o.services["redrive-callbacks"]; s == nil || !labelsMatch(s.Spec.Selector, cb.Spec.Template.Labels) ||
		labelsMatch(s.Spec.Selector, o.deployments["redrive-processor"].Spec.Template.Labels) {
		t.Errorf("overlay: Service redrive-callbacks must select the redrive-callbacks pods, not the processors")
	}
	scraped := false
	for _, s := range o.services {
		for _, sp := range s.Spec.Ports {
			scraped = scraped || sp.Name == "metrics" && labelsMatch(s.Spec.Selector, cb.Spec.Template.Labels)
		}
	}
	if !scraped {
		t.Errorf("overlay: no Service with a port metrics selects redrive-callbacks (its intake metrics are not scraped)")
	}
	pdb := false
	for _, b := range o.pdbs {
		pdb = pdb || labelsMatch(b.Spec.Selector.MatchLabels, cb.Spec.Template.Labels)
	}
	if !pdb {
		t.Errorf("overlay: no PodDisruptionBudget for redrive-callbacks")
	}
}

// checkScaledObject checks the processors' ScaledObject against the
// config c: kafka triggers on pipelines' consumer groups and, for
// pipelines in share mode, prometheus triggers on redrive_share_lag
// (shareQuery). maxReplicaCount stays within every kafka trigger's
// pipeline's partitions unless a share trigger is there: a share group
// gives work to members past the partition count.
func checkScaledObject(t *testing.T, so *scaledObject, c *config.Config, o *objects) {
	t.Helper()
	s := so.Spec
	if s.ScaleTargetRef == nil || s.ScaleTargetRef.Name != "redrive-processor" || s.ScaleTargetRef.Kind != "Deployment" {
		t.Errorf("ScaledObject %s: scaleTargetRef %+v, want the Deployment redrive-processor", so.Name, s.ScaleTargetRef)
	}
	if s.MaxReplicaCount == nil || s.MinReplicaCount == nil || *s.MinReplicaCount < 1 || *s.MaxReplicaCount < *s.MinReplicaCount {
		t.Fatalf("ScaledObject %s: min %v max %v replicas: both explicit, 1 <= min <= max", so.Name, s.MinReplicaCount, s.MaxReplicaCount)
	}
	groups := map[string]config.Pipeline{}
	pipelines := map[string]config.Pipeline{}
	for _, p := range c.Pipelines {
		groups[p.GroupID()] = p
		pipelines[p.Name] = p
	}
	if len(s.Triggers) == 0 {
		t.Fatalf("ScaledObject %s: no triggers", so.Name)
	}
	shared := map[string]bool{} // pipelines scaled on their share lag
	for _, tr := range s.Triggers {
		if tr.Type != "prometheus" {
			continue
		}
		md := tr.Metadata
		m := shareQuery.FindStringSubmatch(md["query"])
		if m == nil {
			t.Errorf("ScaledObject %s: prometheus trigger %s queries %q, want max(redrive_share_lag{pipeline=\"<pipeline>\"}) (every replica exports the whole group's lag)", so.Name, tr.Name, md["query"])
			continue
		}
		if _, ok := pipelines[m[1]]; !ok {
			t.Errorf("ScaledObject %s: prometheus trigger %s: pipeline %q is not in the config", so.Name, tr.Name, m[1])
		}
		shared[m[1]] = true
		if th, err := strconv.ParseFloat(md["threshold"], 64); err != nil || th <= 0 {
			t.Errorf("ScaledObject %s: prometheus trigger %s: threshold %q must be set explicitly to a positive number", so.Name, tr.Name, md["threshold"])
		}
		if u := md["serverAddress"]; !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			t.Errorf("ScaledObject %s: prometheus trigger %s: serverAddress %q is not a URL", so.Name, tr.Name, u)
		}
		if md["ignoreNullValues"] != "false" {
			t.Errorf("ScaledObject %s: prometheus trigger %s: ignoreNullValues %q, want \"false\" (no series means the pipeline is not in share mode, not a lag of 0)", so.Name, tr.Name, md["ignoreNullValues"])
		}
	}
	for _, tr := range s.Triggers {
		if tr.Type == "prometheus" {
			continue
		}
		if tr.Type != "kafka" {
			t.Errorf("ScaledObject %s: trigger type %q, want kafka or prometheus", so.Name, tr.Type)
			continue
		}
		md := tr.Metadata
		p, ok := groups[md["consumerGroup"]]
		if !ok {
			t.Errorf("ScaledObject %s: consumerGroup %q is no pipeline's group (redrive.<pipeline>)", so.Name, md["consumerGroup"])
			continue
		}
		lt, err := strconv.Atoi(md["lagThreshold"])
		if err != nil || lt <= 0 {
			t.Errorf("ScaledObject %s: lagThreshold %q must be set explicitly to a positive number", so.Name, md["lagThreshold"])
		}
		if shared[p.Name] {
			// Its consumer group reads the tiers only, its main-topic
			// commits left where they were at the switch: KEDA would count
			// every request since as lag.
			t.Errorf("ScaledObject %s: kafka trigger on %s, whose pipeline is scaled on its share lag", so.Name, md["consumerGroup"])
		}
		if len(shared) == 0 && *s.MaxReplicaCount > p.Partitions {
			t.Errorf("ScaledObject %s: maxReplicaCount %d above pipeline %s's %d partitions", so.Name, *s.MaxReplicaCount, p.Name, p.Partitions)
		}
		if md["allowIdleConsumers"] != "false" {
			t.Errorf("ScaledObject %s: allowIdleConsumers %q, want \"false\" (never more consumers than partitions)", so.Name, md["allowIdleConsumers"])
		}
		if md["topic"] != "" && md["topic"] != p.Topic {
			t.Errorf("ScaledObject %s: topic %q is not pipeline %s's", so.Name, md["topic"], p.Name)
		}
		want := strings.Join(c.Brokers, ",")
		if md["bootstrapServers"] != want {
			t.Errorf("ScaledObject %s: bootstrapServers %q, the config's brokers are %q", so.Name, md["bootstrapServers"], want)
		}
		if tr.AuthenticationRef != nil {
			if _, ok := o.triggerAuths[tr.AuthenticationRef.Name]; !ok {
				t.Errorf("ScaledObject %s: authenticationRef %s not in the build", so.Name, tr.AuthenticationRef.Name)
			}
		}
	}
}

// shareQuery is the query of a share pipeline's prometheus trigger.
var shareQuery = regexp.MustCompile(`^\s*max\(\s*redrive_share_lag\{pipeline="([^"]+)"\}\s*\)\s*$`)

// TestKedaShareVariant builds the example overlay with keda-share.yaml in
// place of keda.yaml, as deploy/README.md says to for share mode, and
// checks it as the overlay's own: decoded strictly, the ScaledObject
// against the config.
func TestKedaShareVariant(t *testing.T) {
	root := kubeDir(t, "")
	fsys := filesys.MakeFsInMemory()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		return fsys.WriteFile(filepath.Join("/k", rel), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	kpath := "/k/overlays/example/kustomization.yaml"
	kust, err := fsys.ReadFile(kpath)
	if err != nil {
		t.Fatal(err)
	}
	swapped := strings.Replace(string(kust), "\n  - keda.yaml\n", "\n  - keda-share.yaml\n", 1)
	if swapped == string(kust) {
		t.Fatalf("%s: no resource line \"  - keda.yaml\" to swap for keda-share.yaml", kpath)
	}
	if err := fsys.WriteFile(kpath, []byte(swapped)); err != nil {
		t.Fatal(err)
	}

	o := buildFS(t, fsys, "/k/overlays/example")
	c := checkCommon(t, "overlay with keda-share.yaml", o)
	if len(o.scaledObjects) != 1 {
		t.Fatalf("overlay with keda-share.yaml: %d ScaledObjects, want 1 (KEDA refuses two on one Deployment)", len(o.scaledObjects))
	}
	so := o.scaledObjects["redrive-processor"]
	if so == nil {
		t.Fatal("overlay with keda-share.yaml: no ScaledObject redrive-processor")
	}
	checkScaledObject(t, so, c, o)
	share := 0
	for _, tr := range so.Spec.Triggers {
		if tr.Type == "prometheus" {
			share++
		}
	}
	if share == 0 {
		t.Errorf("keda-share.yaml: no prometheus trigger on redrive_share_lag")
	}
}

func TestShareQuery(t *testing.T) {
	for q, want := range map[string]string{
		`max(redrive_share_lag{pipeline="solve"})`:    "solve",
		` max( redrive_share_lag{pipeline="a.b"} ) `:  "a.b",
		`sum(redrive_share_lag{pipeline="solve"})`:    "", // once per replica
		`max(redrive_consumer_lag{pipeline="solve"})`: "",
		`redrive_share_lag{pipeline="solve"}`:         "", // one value per replica
	} {
		got := ""
		if m := shareQuery.FindStringSubmatch(q); m != nil {
			got = m[1]
		}
		if got != want {
			t.Errorf("shareQuery on %q: %q, want %q", q, got, want)
		}
	}
}

// checkCommon asserts what base and overlay share and returns the config
// the ConfigMap carries.
func checkCommon(t *testing.T, what string, o *objects) *config.Config {
	t.Helper()
	if len(o.configMaps) != 1 {
		t.Fatalf("%s: %d ConfigMaps, want the config's one", what, len(o.configMaps))
	}
	var cm *corev1.ConfigMap
	for _, v := range o.configMaps {
		cm = v
	}
	raw, ok := cm.Data["redrive.yaml"]
	if !ok {
		t.Fatalf("%s: ConfigMap %s has no redrive.yaml", what, cm.Name)
	}
	// The env the pods get from the Secret, with example values.
	env := map[string]string{"REDRIVE_ANALYZER_TOKEN": "analyzer-token-0123456789", "REDRIVE_INSTANCE": "pod-0", "CB_TOKEN": "cb-token-0123456789abcdef", "CAPTCHA_API_KEY": "key"}
	c, err := config.Parse([]byte(raw), func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%s: the ConfigMap's redrive.yaml does not load: %v", what, err)
	}
	// The analyzer listens on all interfaces: it starts only with a token
	// from the Secret (either one), and refuses to without.
	if err := c.CheckAnalyzerListen(); err != nil {
		t.Errorf("%s: the analyzer would refuse to start with the Secret's token: %v", what, err)
	}
	// The callback token is always in the Secret: a public intake
	// without one would not start.
	for _, e := range []map[string]string{{"REDRIVE_ANALYZER_READ_TOKEN": "read-only-0123456789"}, {}} {
		readToken := len(e) > 0
		e["CB_TOKEN"] = env["CB_TOKEN"]
		ca, err := config.Parse([]byte(raw), func(k string) string { return e[k] })
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := ca.CheckAnalyzerListen(); (err == nil) != readToken {
			t.Errorf("%s: with the Secret's %v only, the listen rule says %v", what, e, err)
		}
	}
	if _, err := config.Parse([]byte(raw), func(k string) string {
		return map[string]string{"REDRIVE_ANALYZER_TOKEN": env["REDRIVE_ANALYZER_TOKEN"]}[k]
	}); c.HasCallbacks() && err == nil {
		t.Errorf("%s: the config loads without the Secret's CB_TOKEN: a public callback intake would take anyone's callbacks", what)
	}
	checkNetworkPolicies(t, what, o)
	if c.HTTPAddr != "0.0.0.0:9090" {
		t.Errorf("%s: http_addr %q, want 0.0.0.0:9090 (the kubelet and Prometheus reach the pod's IP)", what, c.HTTPAddr)
	}
	if c.Analyzer.HTTPAddr != "0.0.0.0:9091" {
		t.Errorf("%s: analyzer.http_addr %q, want 0.0.0.0:9091", what, c.Analyzer.HTTPAddr)
	}
	if c.CallbackAddr != "0.0.0.0:8443" {
		t.Errorf("%s: callback_addr %q, want 0.0.0.0:8443 (the container port callbacks)", what, c.CallbackAddr)
	}

	for name, cfg := range map[string]struct {
		cmd      string
		port     int32
		optional bool
	}{"redrive-processor": {"process", 9090, false}, "redrive-analyzer": {"analyze", 9091, false}, "redrive-callbacks": {"callbacks", 9090, true}} {
		d := o.deployments[name]
		if d == nil {
			if !cfg.optional {
				t.Errorf("%s: no Deployment %s", what, name)
			}
			continue
		}
		checkDeployment(t, what, d, cm.Name, cfg.cmd, cfg.port, c)
	}
	checkIntake(t, what, o, raw, c)

	// Services select the pods and name the ports the ServiceMonitor scrapes.
	svcPorts := map[string]bool{}
	for _, s := range o.services {
		if s.Labels["app.kubernetes.io/part-of"] != "redrive" {
			t.Errorf("%s: Service %s lacks app.kubernetes.io/part-of=redrive (the ServiceMonitor selects by it)", what, s.Name)
		}
		matched := false
		for _, d := range o.deployments {
			if labelsMatch(s.Spec.Selector, d.Spec.Template.Labels) {
				matched = true
				for _, sp := range s.Spec.Ports {
					svcPorts[sp.Name] = true
					if sp.TargetPort.Type != intstr.String || !hasPort(d, sp.TargetPort.StrVal) {
						t.Errorf("%s: Service %s port %s targets %s, not a named port of %s", what, s.Name, sp.Name, sp.TargetPort.String(), d.Name)
					}
				}
			}
		}
		if !matched {
			t.Errorf("%s: Service %s selects no Deployment's pods", what, s.Name)
		}
	}
	if _, ok := o.services["redrive-analyzer"]; !ok {
		t.Errorf("%s: no Service redrive-analyzer (dashboard)", what)
	}
	if len(o.serviceMonitors) != 1 {
		t.Errorf("%s: %d ServiceMonitors, want 1", what, len(o.serviceMonitors))
	}
	for _, sm := range o.serviceMonitors {
		for _, ep := range sm.Spec.Endpoints {
			if !svcPorts[ep.Port] {
				t.Errorf("%s: ServiceMonitor %s scrapes port %q no Service has", what, sm.Name, ep.Port)
			}
			if ep.Path != "/metrics" {
				t.Errorf("%s: ServiceMonitor %s path %q", what, sm.Name, ep.Path)
			}
		}
	}
	if len(o.pdbs) == 0 {
		t.Errorf("%s: no PodDisruptionBudget", what)
	}
	processors := false
	for _, pdb := range o.pdbs {
		if d := o.deployments["redrive-processor"]; d != nil && labelsMatch(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
			processors = true
		}
		selects := false
		for _, d := range o.deployments {
			selects = selects || labelsMatch(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
		}
		if !selects {
			t.Errorf("%s: PodDisruptionBudget %s selects no Deployment's pods", what, pdb.Name)
		}
	}
	if !processors {
		t.Errorf("%s: no PodDisruptionBudget selects the processors", what)
	}
	if len(o.rules) != 1 {
		t.Errorf("%s: %d PrometheusRules, want 1", what, len(o.rules))
	}
	for _, pr := range o.rules {
		want := rulesFileGroups(t)
		if !reflect.DeepEqual(pr.Spec.Groups, want) {
			t.Errorf("%s: PrometheusRule %s differs from deploy/prometheus/redrive-rules.yaml: run REDRIVE_UPDATE_DEPLOY=1 go test ./deploy -run PrometheusRule", what, pr.Name)
		}
	}
	return c
}

func checkDeployment(t *testing.T, what string, d *appsv1.Deployment, cmName, cmd string, port int32, c *config.Config) {
	t.Helper()
	at := what + ": Deployment " + d.Name
	ps := d.Spec.Template.Spec
	if !labelsMatch(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("%s: selector does not match the pod labels", at)
	}
	if len(ps.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", at, len(ps.Containers))
	}
	ct := ps.Containers[0]
	wantArgs := []string{cmd, "-c", "/etc/redrive/redrive.yaml"}
	if len(ct.Args) < 3 || !reflect.DeepEqual(ct.Args[:3], wantArgs) {
		t.Errorf("%s: args %q, want %q first", at, ct.Args, wantArgs)
	}
	if !hasPortNumber(ct, "http", port) {
		t.Errorf("%s: no container port http=%d", at, port)
	}
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: no %s httpGet probe", at, name)
			return
		}
		if p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s: %s probe %s on port %s, want %s on http", at, name, p.HTTPGet.Path, p.HTTPGet.Port.String(), path)
		}
	}
	probe("liveness", ct.LivenessProbe, "/healthz")
	probe("readiness", ct.ReadinessProbe, "/readyz")
	// Liveness must tolerate obs.DefaultStall-like pauses: it fails only
	// after more than 30s of failed probes.
	if lp := ct.LivenessProbe; lp != nil && time.Duration(lp.PeriodSeconds*lp.FailureThreshold)*time.Second < 30*time.Second {
		t.Errorf("%s: liveness fails after %ds, want at least 30s", at, lp.PeriodSeconds*lp.FailureThreshold)
	}

	// The pod outlives shutdown_grace, the revoke wait (5s) and the final
	// commit and leave: at least shutdown_grace + 15s before SIGKILL.
	if ps.TerminationGracePeriodSeconds == nil {
		t.Errorf("%s: no terminationGracePeriodSeconds", at)
	} else if g := time.Duration(*ps.TerminationGracePeriodSeconds) * time.Second; g < c.ShutdownGrace.D()+15*time.Second {
		t.Errorf("%s: terminationGracePeriodSeconds %s, want more than shutdown_grace %s + 15s", at, g, c.ShutdownGrace.D())
	}

	sc, psc := ct.SecurityContext, ps.SecurityContext
	nonRoot := func(s *bool) bool { return s != nil && *s }
	if psc == nil || !nonRoot(psc.RunAsNonRoot) || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s: pod securityContext must set runAsNonRoot and a non-zero runAsUser", at)
	}
	if sc == nil || !nonRoot(sc.ReadOnlyRootFilesystem) {
		t.Errorf("%s: container securityContext must set readOnlyRootFilesystem", at)
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("%s: container securityContext must drop ALL capabilities and forbid privilege escalation", at)
	}

	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okR := ct.Resources.Requests[r]
		lim, okL := ct.Resources.Limits[r]
		if !okR || !okL {
			t.Errorf("%s: resources: %s request and limit must both be set", at, r)
		} else if req.Cmp(lim) > 0 {
			t.Errorf("%s: resources: %s request %s above limit %s", at, r, req.String(), lim.String())
		}
	}

	// Config from the ConfigMap, mounted where -c points.
	var cfgVol string
	for _, v := range ps.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cmName {
			cfgVol = v.Name
		}
	}
	mounted := false
	for _, m := range ct.VolumeMounts {
		if m.Name == cfgVol && m.MountPath == "/etc/redrive" && m.ReadOnly {
			mounted = true
		}
	}
	if cfgVol == "" || !mounted {
		t.Errorf("%s: ConfigMap %s is not mounted read-only at /etc/redrive", at, cmName)
	}

	// Broker credentials from the Secret, never literal.
	secretEnv := map[string]bool{}
	for _, e := range ct.Env {
		if strings.HasPrefix(e.Name, "REDRIVE_SASL_") || e.Name == "REDRIVE_ANALYZER_TOKEN" || e.Name == "REDRIVE_ANALYZER_READ_TOKEN" {
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "redrive-kafka" {
				t.Errorf("%s: env %s must come from the Secret redrive-kafka", at, e.Name)
			}
			secretEnv[e.Name] = true
		}
	}
	for _, n := range []string{config.EnvSASLMechanism, config.EnvSASLUser, config.EnvSASLPassword} {
		if !secretEnv[n] {
			t.Errorf("%s: env %s from the Secret is missing", at, n)
		}
	}
	if cmd == "analyze" {
		for _, n := range []string{config.EnvAnalyzerToken, config.EnvAnalyzerReadToken} {
			if !secretEnv[n] {
				t.Errorf("%s: env %s from the Secret is missing", at, n)
			}
		}
	}
}

// callbacksPort is the port of callback_addr in the manifests.
const callbacksPort = 8443

// envRef matches a ${NAME} of the config; markedEnv the value checkIntake
// has it stand for (no space, and long enough for a token's rule).
var (
	envRef    = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	markedEnv = regexp.MustCompile(`<env-([A-Za-z_][A-Za-z0-9_]*)-from-the-secret>`)
)

// checkIntake checks the callback intake's exposure: the container port
// callbacks (callback_addr) on the processors and on whatever serves the
// intake, one public Service redrive-callbacks with that port only (apart
// from the metrics Services, never scraped), and the secrets the config
// names (${NAME}) from the Secret: every one on the processors, the
// callback tokens on the intake's pods too, where they are required.
func checkIntake(t *testing.T, what string, o *objects, raw string, c *config.Config) {
	t.Helper()
	if p := o.deployments["redrive-processor"]; p != nil && !hasPortNumber(p.Spec.Template.Spec.Containers[0], "callbacks", callbacksPort) {
		t.Errorf("%s: the processor has no container port callbacks=%d (redrive process serves callback_addr)", what, callbacksPort)
	}
	s := o.services["redrive-callbacks"]
	if s == nil {
		t.Fatalf("%s: no Service redrive-callbacks (the callback intake)", what)
	}
	if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Name != "callbacks" || s.Spec.Ports[0].Port != callbacksPort || s.Spec.Ports[0].TargetPort.String() != "callbacks" {
		t.Errorf("%s: Service redrive-callbacks ports %+v, want only callbacks %d -> callbacks (public: nothing else)", what, s.Spec.Ports, callbacksPort)
	}
	serving := 0
	for _, d := range o.deployments {
		if !labelsMatch(s.Spec.Selector, d.Spec.Template.Labels) {
			continue
		}
		serving++
		ct := d.Spec.Template.Spec.Containers[0]
		if len(ct.Args) == 0 || (ct.Args[0] != "process" && ct.Args[0] != "callbacks") {
			t.Errorf("%s: Service redrive-callbacks selects %s, which runs %q: neither process nor callbacks", what, d.Name, ct.Args)
		}
		if !hasPortNumber(ct, "callbacks", callbacksPort) {
			t.Errorf("%s: Service redrive-callbacks selects %s, which has no container port callbacks=%d", what, d.Name, callbacksPort)
		}
	}
	if serving == 0 {
		t.Errorf("%s: Service redrive-callbacks selects no pods", what)
	}
	for _, other := range o.services {
		for _, sp := range other.Spec.Ports {
			if other.Name != s.Name && (sp.Name == "callbacks" || sp.TargetPort.String() == "callbacks") {
				t.Errorf("%s: Service %s exposes the callback intake too; only redrive-callbacks may", what, other.Name)
			}
		}
	}
	for _, sm := range o.serviceMonitors {
		for _, ep := range sm.Spec.Endpoints {
			if ep.Port == "callbacks" {
				t.Errorf("%s: ServiceMonitor %s scrapes the public callbacks port", what, sm.Name)
			}
		}
	}

	// The config's secrets. A callback must have a token from the
	// environment (the Secret): the intake is public. The config is loaded
	// again with each ${NAME} standing for itself, to see which names the
	// tokens come from.
	named := map[string]bool{}
	for _, m := range envRef.FindAllStringSubmatch(raw, -1) {
		named[m[1]] = true
	}
	marked, err := config.Parse([]byte(raw), func(k string) string {
		if named[k] {
			return "<env-" + k + "-from-the-secret>"
		}
		return "" // the REDRIVE_* overrides
	})
	if err != nil {
		t.Fatalf("%s: the config with marked ${NAME}s: %v", what, err)
	}
	tokens := map[string]bool{}
	for _, p := range marked.Pipelines {
		cb := p.Handler.Callback
		if cb == nil {
			continue
		}
		names := markedEnv.FindAllStringSubmatch(cb.Token, -1)
		if len(names) == 0 {
			t.Errorf("%s: pipeline %s's handler.callback.token is not from the environment (\"${CB_TOKEN}\", set from the Secret): anyone could post its callbacks, or the token is in the ConfigMap", what, p.Name)
		}
		for _, m := range names {
			tokens[m[1]] = true
		}
	}
	delete(named, config.EnvAnalyzerToken) // the analyzer's (checkDeployment)
	for name := range named {
		if p := o.deployments["redrive-processor"]; p != nil && secretEnvRef(p, name) == nil {
			t.Errorf("%s: the config names ${%s}; the processor does not get it from the Secret redrive-kafka", what, name)
		}
	}
	for name := range tokens {
		if d := o.deployments["redrive-callbacks"]; d != nil {
			if ref := secretEnvRef(d, name); ref == nil || (ref.Optional != nil && *ref.Optional) {
				t.Errorf("%s: redrive-callbacks must get %s from the Secret redrive-kafka, not optional (an intake without its token takes anyone's callbacks)", what, name)
			}
		}
	}
}

// secretEnvRef is the Secret key d's container reads env name from, nil
// if it is not from the Secret redrive-kafka.
func secretEnvRef(d *appsv1.Deployment, name string) *corev1.SecretKeySelector {
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name && e.Value == "" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "redrive-kafka" {
			return e.ValueFrom.SecretKeyRef
		}
	}
	return nil
}

func labelsMatch(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func hasPort(d *appsv1.Deployment, name string) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

func hasPortNumber(c corev1.Container, name string, n int32) bool {
	for _, p := range c.Ports {
		if p.Name == name && p.ContainerPort == n {
			return true
		}
	}
	return false
}

const rulesFile = "prometheus/redrive-rules.yaml"
const promRuleFile = "kubernetes/base/prometheusrule.yaml"

// rulesFileGroups decodes the plain rules file strictly.
func rulesFileGroups(t *testing.T) []monitoringv1.RuleGroup {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := sigsyaml.UnmarshalStrict(data, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	if len(f.Groups) == 0 {
		t.Fatalf("%s: no groups", rulesFile)
	}
	return f.Groups
}

// promRuleFromRules renders the PrometheusRule from the plain rules file:
// the file's groups, indented under spec.
func promRuleFromRules(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i := strings.Index(s, "\ngroups:")
	if i < 0 {
		t.Fatalf("%s: no top-level groups:", rulesFile)
	}
	var b strings.Builder
	b.WriteString("# Generated from deploy/prometheus/redrive-rules.yaml: do not edit; run\n")
	b.WriteString("#   REDRIVE_UPDATE_DEPLOY=1 go test ./deploy -run PrometheusRule\n")
	b.WriteString("apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: redrive\nspec:\n")
	for _, line := range strings.Split(strings.TrimRight(s[i+1:], "\n"), "\n") {
		if line == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString("  " + line + "\n")
	}
	return b.String()
}

func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	want := promRuleFromRules(t)
	if os.Getenv("REDRIVE_UPDATE_DEPLOY") != "" {
		if err := os.WriteFile(promRuleFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(promRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is not the one generated from %s: run REDRIVE_UPDATE_DEPLOY=1 go test ./deploy -run PrometheusRule", promRuleFile, rulesFile)
	}
	var pr monitoringv1.PrometheusRule
	if err := sigsyaml.UnmarshalStrict(got, &pr); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pr.Spec.Groups, rulesFileGroups(t)) {
		t.Fatal("PrometheusRule groups differ from the rules file")
	}
	// Every alert has for, a severity, a summary and a description.
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			at := fmt.Sprintf("group %s alert %s", g.Name, r.Alert)
			if r.Alert == "" {
				continue
			}
			if r.For == nil || *r.For == "" {
				t.Errorf("%s: no for:", at)
			}
			if sev := r.Labels["severity"]; sev != "warning" && sev != "critical" {
				t.Errorf("%s: severity %q", at, sev)
			}
			if r.Annotations["summary"] == "" || len(r.Annotations["description"]) < 40 {
				t.Errorf("%s: needs a summary and a description saying what to do", at)
			}
		}
	}
}

// The strict decoding the build tests rely on rejects a misspelt field.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	bad := map[string]any{
		"deployment":   &appsv1.Deployment{},
		"scaledobject": &scaledObject{},
		"rule":         &monitoringv1.PrometheusRule{},
	}
	docs := map[string]string{
		"deployment":   "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n",
		"scaledobject": "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: x}\n  maxReplicas: 3\n  triggers: []\n",
		"rule":         "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: x}\nspec:\n  groups: [{name: g, rules: [{alert: A, expr: up, fro: 5m}]}]\n",
	}
	for k, v := range bad {
		if err := sigsyaml.UnmarshalStrict([]byte(docs[k]), v); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: strict decoding accepted an unknown field (err %v)", k, err)
		}
	}
}

// The peers the NetworkPolicies let in (deploy/README.md: patch them to
// your cluster's labels).
var (
	prometheusPeer = networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}},
	}
	ingressPeer = networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "ingress-nginx"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "ingress-nginx"}},
	}
)

// checkNetworkPolicies: every Deployment's pods are selected by an
// Ingress policy; each rule names its peers (no open rule, no ipBlock) and
// named ports of those pods; the analyzer's port takes only the ingress
// controller and Prometheus, the metrics ports (the ServiceMonitor's)
// only Prometheus, and the callback intake only the ingress controller.
func checkNetworkPolicies(t *testing.T, what string, o *objects) {
	t.Helper()
	// want: for each Deployment, its named port -> the peers allowed.
	want := map[string]map[string][]networkingv1.NetworkPolicyPeer{
		"redrive-analyzer":  {"http": {ingressPeer, prometheusPeer}},
		"redrive-processor": {"http": {prometheusPeer}, "callbacks": {ingressPeer}},
		"redrive-callbacks": {"http": {prometheusPeer}, "callbacks": {ingressPeer}},
	}
	for name, d := range o.deployments {
		w, ok := want[name]
		if !ok {
			t.Errorf("%s: Deployment %s: no NetworkPolicy expectation; add one", what, name)
			continue
		}
		got := map[string][]networkingv1.NetworkPolicyPeer{}
		selected := 0
		for _, np := range o.netPolicies {
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil {
				t.Errorf("%s: NetworkPolicy %s: %v", what, np.Name, err)
				continue
			}
			if len(np.Spec.PodSelector.MatchLabels)+len(np.Spec.PodSelector.MatchExpressions) == 0 || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				continue
			}
			selected++
			if len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
				t.Errorf("%s: NetworkPolicy %s: policyTypes %v, want [Ingress]", what, np.Name, np.Spec.PolicyTypes)
			}
			for i, r := range np.Spec.Ingress {
				if len(r.From) == 0 || len(r.Ports) == 0 {
					t.Errorf("%s: NetworkPolicy %s ingress[%d] allows any peer or any port", what, np.Name, i)
				}
				for _, p := range r.Ports {
					if p.Port == nil || p.Port.Type != intstr.String || !hasPort(d, p.Port.StrVal) || p.Protocol == nil || *p.Protocol != corev1.ProtocolTCP {
						t.Errorf("%s: NetworkPolicy %s ingress[%d] port %v: want a named TCP port of %s", what, np.Name, i, p.Port, name)
						continue
					}
					for _, f := range r.From {
						if f.IPBlock != nil || f.PodSelector == nil || f.NamespaceSelector == nil {
							t.Errorf("%s: NetworkPolicy %s ingress[%d]: a peer %+v, want a namespace and pod selector", what, np.Name, i, f)
						}
						got[p.Port.StrVal] = append(got[p.Port.StrVal], f)
					}
				}
			}
		}
		if selected != 1 {
			t.Errorf("%s: %d NetworkPolicies select the pods of %s, want 1", what, selected, name)
			continue
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s: %s: the NetworkPolicy lets in\n%v\nwant\n%v", what, name, got, w)
		}
	}
	// Prometheus may scrape every port the ServiceMonitor names.
	for _, sm := range o.serviceMonitors {
		for _, ep := range sm.Spec.Endpoints {
			for _, s := range o.services {
				for _, sp := range s.Spec.Ports {
					if sp.Name != ep.Port {
						continue
					}
					for name, d := range o.deployments {
						if !labelsMatch(s.Spec.Selector, d.Spec.Template.Labels) {
							continue
						}
						ok := false
						for _, p := range want[name][sp.TargetPort.StrVal] {
							ok = ok || reflect.DeepEqual(p, prometheusPeer)
						}
						if !ok {
							t.Errorf("%s: the ServiceMonitor scrapes %s port %s (%s), which no NetworkPolicy opens to Prometheus", what, name, ep.Port, sp.TargetPort.StrVal)
						}
					}
				}
			}
		}
	}
}
