package deploy

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KEDA's Go module (github.com/kedacore/keda/v2) pulls in every scaler's
// client library, so the two KEDA kinds the overlay uses are decoded into
// these minimal mirrors of their published CRDs (keda.sh/v1alpha1
// ScaledObject and TriggerAuthentication, spec fields only). Decoding is
// strict, so a field that is not in this mirror (a typo, or a field of a
// newer KEDA) fails the test: add it here after checking the CRD.

type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              scaledObjectSpec `json:"spec"`
}

type scaledObjectSpec struct {
	ScaleTargetRef        *scaleTarget    `json:"scaleTargetRef"`
	PollingInterval       *int32          `json:"pollingInterval,omitempty"`
	InitialCooldownPeriod *int32          `json:"initialCooldownPeriod,omitempty"`
	CooldownPeriod        *int32          `json:"cooldownPeriod,omitempty"`
	IdleReplicaCount      *int32          `json:"idleReplicaCount,omitempty"`
	MinReplicaCount       *int32          `json:"minReplicaCount,omitempty"`
	MaxReplicaCount       *int32          `json:"maxReplicaCount,omitempty"`
	Advanced              *kedaAdvanced   `json:"advanced,omitempty"`
	Triggers              []scaleTriggers `json:"triggers"`
	Fallback              *kedaFallback   `json:"fallback,omitempty"`
}

type scaleTarget struct {
	APIVersion             string `json:"apiVersion,omitempty"`
	Kind                   string `json:"kind,omitempty"`
	Name                   string `json:"name"`
	EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
}

type kedaAdvanced struct {
	HorizontalPodAutoscalerConfig *hpaConfig `json:"horizontalPodAutoscalerConfig,omitempty"`
	RestoreToOriginalReplicaCount bool       `json:"restoreToOriginalReplicaCount,omitempty"`
	ScalingModifiers              *struct {
		Formula          string `json:"formula,omitempty"`
		Target           string `json:"target,omitempty"`
		ActivationTarget string `json:"activationTarget,omitempty"`
		MetricType       string `json:"metricType,omitempty"`
	} `json:"scalingModifiers,omitempty"`
}

type hpaConfig struct {
	Name     string                                         `json:"name,omitempty"`
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
}

type kedaFallback struct {
	FailureThreshold int32  `json:"failureThreshold"`
	Replicas         int32  `json:"replicas"`
	Behavior         string `json:"behavior,omitempty"`
}

type scaleTriggers struct {
	Type              string            `json:"type"`
	Name              string            `json:"name,omitempty"`
	UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
	Metadata          map[string]string `json:"metadata"`
	AuthenticationRef *struct {
		Name string `json:"name"`
		Kind string `json:"kind,omitempty"`
	} `json:"authenticationRef,omitempty"`
	MetricType string `json:"metricType,omitempty"`
}

type triggerAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		SecretTargetRef []struct {
			Parameter string `json:"parameter"`
			Name      string `json:"name"`
			Key       string `json:"key"`
		} `json:"secretTargetRef,omitempty"`
		Env []struct {
			Parameter     string `json:"parameter"`
			Name          string `json:"name"`
			ContainerName string `json:"containerName,omitempty"`
		} `json:"env,omitempty"`
	} `json:"spec"`
}
