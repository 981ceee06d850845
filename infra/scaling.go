package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapplicationautoscaling"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	elbv2 "github.com/aws/aws-cdk-go/awscdk/v2/awselasticloadbalancingv2"
	"github.com/aws/jsii-runtime-go"
)

// Autoscaling targets: average CPU per service, and ALB requests per
// control task per minute.
const (
	cpuTarget         = 60
	requestsPerTarget = 1000
)

// addScaling scales control on CPU and on its requests per task, and
// dispatch on CPU and on the queue's depth (steps at 1, 2 and 4 times
// cfg.QueueScaleOutDepth queued tasks, one task less when the queue is
// empty). Application Auto Scaling follows whichever policy asks for the
// most tasks, so a busy queue is never scaled in by an idle CPU.
func addScaling(cfg Config, control, dispatch awsecs.FargateService, controlTargets elbv2.ApplicationTargetGroup) {
	scale := func(svc awsecs.FargateService, r TaskRange) awsecs.ScalableTaskCount {
		s := svc.AutoScaleTaskCount(&awsapplicationautoscaling.EnableScalingProps{
			MinCapacity: jsii.Number(float64(r.Min)), MaxCapacity: jsii.Number(float64(r.Max)),
		})
		s.ScaleOnCpuUtilization(jsii.String("Cpu"), &awsecs.CpuUtilizationScalingProps{TargetUtilizationPercent: jsii.Number(cpuTarget)})
		return s
	}
	scale(control, cfg.Control).ScaleOnRequestCount(jsii.String("Requests"), &awsecs.RequestCountScalingProps{
		RequestsPerTarget: jsii.Number(requestsPerTarget), TargetGroup: controlTargets,
	})
	d := cfg.QueueScaleOutDepth
	scale(dispatch, cfg.Dispatch).ScaleOnMetric(jsii.String("QueueDepth"), &awsapplicationautoscaling.BasicStepScalingPolicyProps{
		Metric:         pendingTasksMetric(),
		AdjustmentType: awsapplicationautoscaling.AdjustmentType_CHANGE_IN_CAPACITY,
		ScalingSteps: &[]*awsapplicationautoscaling.ScalingInterval{
			{Upper: jsii.Number(0), Change: jsii.Number(-1)},
			{Lower: jsii.Number(d), Change: jsii.Number(1)},
			{Lower: jsii.Number(2 * d), Change: jsii.Number(2)},
			{Lower: jsii.Number(4 * d), Change: jsii.Number(4)},
		},
		Cooldown: awscdk.Duration_Minutes(jsii.Number(3)),
	})
}

// pendingTasksMetric is the dispatcher's queue depth, as the metrics agent
// publishes it (addMetricsAgent). One scrape a minute: the per-minute sum
// adds every pod's shard range and kind.
func pendingTasksMetric() awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace: jsii.String(metricsNamespace), MetricName: jsii.String("converge_dispatch_pending_tasks"),
		DimensionsMap: &map[string]*string{"job": jsii.String(metricsJob)}, Statistic: jsii.String("Sum"), Period: awscdk.Duration_Minutes(jsii.Number(1)),
	})
}
