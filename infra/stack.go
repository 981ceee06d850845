package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecrassets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	elbv2 "github.com/aws/aws-cdk-go/awscdk/v2/awselasticloadbalancingv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsrds"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Config is what the stack reads from CDK context (cdk.json or -c key=value).
type Config struct {
	// CertificateArn is the ACM certificate of the HTTPS listener.
	CertificateArn string
	// DomainName is the name that certificate covers, pointed (CNAME/alias)
	// at the load balancer: providers call back to https://DomainName.
	DomainName string
	// RepoRoot holds the Dockerfile the converge image is built from.
	RepoRoot string
	// ProviderZip is the quickstart provider's Lambda package (make functions).
	ProviderZip string
	// PlaceholderProvider deploys a stand-in function when ProviderZip is
	// absent, so the stack synthesizes before `make functions` ran.
	PlaceholderProvider bool
	// CloudWatchAgentImage scrapes the dispatcher's /metrics into CloudWatch.
	CloudWatchAgentImage string
	// DeletionProtection guards the database against `cdk destroy`.
	DeletionProtection bool
	// Alarm thresholds: failed deliveries per 5 minutes, and queued tasks.
	FailedDeliveriesThreshold, QueueDepthThreshold float64
}

// The ports converge listens on (LISTEN_ADDR, HEALTH_ADDR).
const (
	apiPort    = 8080
	healthPort = 8081
	dbUser     = "converge"
	dbName     = "converge"
	// The CloudWatch namespace and scrape job of the dispatcher's metrics.
	metricsNamespace = "Converge"
	metricsJob       = "converge-dispatch"
	// Delivery results that mean the provider did not take the task (the
	// results of converge_dispatch_deliveries_total, dispatch/metrics.go,
	// less ok, accepted, task_error and cancelled).
	failedResults = "rate_limited|gone|redirect|client_error|server_error|retryable|unexpected|malformed|too_large|timeout|deadline|network|blocked"
)

// NewConvergeStack builds the whole deployment: network, database, the two
// converge roles behind an HTTPS load balancer, the Lambda-hosted quickstart
// provider, keys and alarms.
func NewConvergeStack(scope constructs.Construct, id string, cfg Config, props *awscdk.StackProps) (awscdk.Stack, error) {
	if cfg.CertificateArn == "" || cfg.DomainName == "" {
		return nil, fmt.Errorf("context certificateArn and domainName are required (the HTTPS listener's ACM certificate and the name it covers)")
	}
	code, err := providerCode(cfg)
	if err != nil {
		return nil, err
	}
	stack := awscdk.NewStack(scope, jsii.String(id), props)

	// Public subnets for the load balancer and the tasks, isolated ones for the
	// database, and no NAT gateway: the dispatcher must reach providers on the
	// internet anyway, so the tasks get public IPs and a security group that
	// only admits the load balancer.
	vpc := awsec2.NewVpc(stack, jsii.String("Vpc"), &awsec2.VpcProps{
		MaxAzs:      jsii.Number(2),
		NatGateways: jsii.Number(0),
		SubnetConfiguration: &[]*awsec2.SubnetConfiguration{
			{Name: jsii.String("public"), SubnetType: awsec2.SubnetType_PUBLIC, CidrMask: jsii.Number(24)},
			{Name: jsii.String("db"), SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED, CidrMask: jsii.Number(24)},
		},
	})

	// One customer-managed key for every secret and the database storage.
	key := awskms.NewKey(stack, jsii.String("Key"), &awskms.KeyProps{
		Description:       jsii.String("Converge: secrets and database storage"),
		EnableKeyRotation: jsii.Bool(true),
	})
	// Written once by the bootstrap function below (converge wants base64 of
	// exact byte counts, which GenerateSecretString cannot produce).
	secretKey := awssecretsmanager.NewSecret(stack, jsii.String("SecretKey"), &awssecretsmanager.SecretProps{
		Description: jsii.String("CONVERGE_SECRET_KEY: base64 of 32 bytes, encrypts endpoint signing secrets at rest"), EncryptionKey: key,
	})
	callbackKey := awssecretsmanager.NewSecret(stack, jsii.String("CallbackKey"), &awssecretsmanager.SecretProps{
		Description: jsii.String("CONVERGE_CALLBACK_KEY: base64 of 48 bytes, signs callback tokens"), EncryptionKey: key,
	})
	// {"token": the read token the metrics scraper uses, "prometheus": its scrape config}.
	metricsSecret := awssecretsmanager.NewSecret(stack, jsii.String("MetricsScrape"), &awssecretsmanager.SecretProps{
		Description: jsii.String("Read token and scrape config of the dispatcher's /metrics"), EncryptionKey: key,
	})
	adminToken := awssecretsmanager.NewSecret(stack, jsii.String("AdminToken"), &awssecretsmanager.SecretProps{
		Description:   jsii.String("CONVERGE_ADMIN_TOKENS: the API's admin bearer token (conctl)"),
		EncryptionKey: key,
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength: jsii.Number(48), ExcludePunctuation: jsii.Bool(true), IncludeSpace: jsii.Bool(false),
		},
	})
	// 64 characters of [A-Za-z0-9] are the standard base64 of 48 bytes: with
	// the whsec_ prefix, a valid Converge endpoint secret.
	signingSecret := awssecretsmanager.NewSecret(stack, jsii.String("ProviderSigningSecret"), &awssecretsmanager.SecretProps{
		Description:   jsii.String("The quickstart provider endpoint's signing secret (base64 part of whsec_...)"),
		EncryptionKey: key,
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength: jsii.Number(64), ExcludePunctuation: jsii.Bool(true), IncludeSpace: jsii.Bool(false),
		},
	})

	// Aurora PostgreSQL Serverless v2. 0.5 ACU is the floor that matters:
	// every converge process heartbeats every 10 s, so the cluster never
	// idles long enough to pause at 0.
	db := awsrds.NewDatabaseCluster(stack, jsii.String("Db"), &awsrds.DatabaseClusterProps{
		Engine: awsrds.DatabaseClusterEngine_AuroraPostgres(&awsrds.AuroraPostgresClusterEngineProps{
			Version: awsrds.AuroraPostgresEngineVersion_VER_17_5(),
		}),
		Writer:                  awsrds.ClusterInstance_ServerlessV2(jsii.String("writer"), nil),
		ServerlessV2MinCapacity: jsii.Number(0.5),
		ServerlessV2MaxCapacity: jsii.Number(4),
		Vpc:                     vpc,
		VpcSubnets:              &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED},
		IamAuthentication:       jsii.Bool(true),
		// The bootstrap creates the IAM-authenticated user through the Data
		// API, so it needs no network path into the isolated subnets.
		EnableDataApi:        jsii.Bool(true),
		DefaultDatabaseName:  jsii.String(dbName),
		Credentials:          awsrds.Credentials_FromGeneratedSecret(jsii.String("postgres"), nil),
		StorageEncrypted:     jsii.Bool(true),
		StorageEncryptionKey: key,
		DeletionProtection:   jsii.Bool(cfg.DeletionProtection),
		RemovalPolicy:        awscdk.RemovalPolicy_SNAPSHOT,
	})

	bootstrap := newBootstrap(stack, db, secretKey, callbackKey, metricsSecret)
	if err := addKeyRotation(stack, cfg, key, secretKey, callbackKey, bootstrap); err != nil {
		return nil, err
	}

	// The quickstart provider on Lambda, behind an AWS_IAM Function URL.
	providerLogs := awslogs.NewLogGroup(stack, jsii.String("ProviderLogs"), &awslogs.LogGroupProps{
		Retention: awslogs.RetentionDays_ONE_MONTH, RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	providerRole := lambdaRole(stack, "ProviderRole", providerLogs)
	provider := awslambda.NewFunction(stack, jsii.String("QuickstartProvider"), &awslambda.FunctionProps{
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		Code:         code,
		MemorySize:   jsii.Number(128),
		Timeout:      awscdk.Duration_Seconds(jsii.Number(30)),
		Role:         providerRole,
		LogGroup:     providerLogs,
		Environment: &map[string]*string{
			// A dynamic reference: CloudFormation resolves it at deploy time.
			"PROVIDER_SECRETS": jsii.String("whsec_" + *signingSecret.SecretValue().UnsafeUnwrap()),
		},
	})
	providerURL := provider.AddFunctionUrl(&awslambda.FunctionUrlOptions{AuthType: awslambda.FunctionUrlAuthType_AWS_IAM})

	// The converge image and the ECS cluster both roles run on (Graviton).
	image := awsecs.ContainerImage_FromAsset(jsii.String(cfg.RepoRoot), &awsecs.AssetImageProps{
		Platform: awsecrassets.Platform_LINUX_ARM64(),
	})
	cluster := awsecs.NewCluster(stack, jsii.String("Cluster"), &awsecs.ClusterProps{Vpc: vpc})
	albSG := awsec2.NewSecurityGroup(stack, jsii.String("AlbSg"), &awsec2.SecurityGroupProps{
		Vpc: vpc, AllowAllOutbound: jsii.Bool(false), Description: jsii.String("Converge load balancer"),
	})
	albSG.AddIngressRule(awsec2.Peer_AnyIpv4(), awsec2.Port_Tcp(jsii.Number(443)), jsii.String("HTTPS"), nil)
	alb := elbv2.NewApplicationLoadBalancer(stack, jsii.String("Alb"), &elbv2.ApplicationLoadBalancerProps{
		Vpc: vpc, InternetFacing: jsii.Bool(true), SecurityGroup: albSG,
		VpcSubnets: &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PUBLIC},
	})
	callbackBase := "https://" + cfg.DomainName
	dbURL := awscdk.Fn_Join(jsii.String(""), &[]*string{
		jsii.String("postgres://" + dbUser + "@"), db.ClusterEndpoint().Hostname(),
		jsii.String(":"), awscdk.Token_AsString(db.ClusterEndpoint().Port(), nil),
		jsii.String("/" + dbName + "?sslmode=verify-full&sslrootcert=/etc/ssl/certs/rds-global-bundle.pem"),
	})

	type role struct {
		name, role      string
		cpu, mem        float64
		keys            []awssecretsmanager.Secret
		scrapeMetrics   bool
		healthCheckPort int
	}
	services := map[string]awsecs.FargateService{}
	for _, r := range []role{
		{name: "Control", role: "control", cpu: 256, mem: 512, keys: []awssecretsmanager.Secret{secretKey}, healthCheckPort: apiPort},
		{name: "Dispatch", role: "dispatch", cpu: 256, mem: 1024, keys: []awssecretsmanager.Secret{secretKey, callbackKey}, scrapeMetrics: true, healthCheckPort: healthPort},
	} {
		logs := awslogs.NewLogGroup(stack, jsii.String(r.name+"Logs"), &awslogs.LogGroupProps{
			Retention: awslogs.RetentionDays_ONE_MONTH, RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
		})
		td := awsecs.NewFargateTaskDefinition(stack, jsii.String(r.name+"Task"), &awsecs.FargateTaskDefinitionProps{
			Cpu: jsii.Number(r.cpu), MemoryLimitMiB: jsii.Number(r.mem),
			RuntimePlatform: &awsecs.RuntimePlatform{
				CpuArchitecture: awsecs.CpuArchitecture_ARM64(), OperatingSystemFamily: awsecs.OperatingSystemFamily_LINUX(),
			},
		})
		env := map[string]*string{
			"ROLE":              jsii.String(r.role),
			"DATABASE_URL":      dbURL,
			"DB_IAM_AUTH":       jsii.String("true"),
			"AWS_REGION":        stack.Region(),
			"LISTEN_ADDR":       jsii.String(fmt.Sprintf(":%d", apiPort)),
			"HEALTH_ADDR":       jsii.String(fmt.Sprintf(":%d", healthPort)),
			"LOG_FORMAT":        jsii.String("json"),
			"CALLBACK_BASE_URL": jsii.String(callbackBase),
		}
		for _, k := range r.keys {
			name := "CONVERGE_SECRET_KEY_SECRET_ARN"
			if k == callbackKey {
				name = "CONVERGE_CALLBACK_KEY_SECRET_ARN"
			}
			env[name] = k.SecretArn()
			k.GrantRead(td.TaskRole(), nil)
		}
		db.GrantConnect(td.TaskRole(), jsii.String(dbUser))
		td.AddContainer(jsii.String("converge"), &awsecs.ContainerDefinitionOptions{
			Image:       image,
			Essential:   jsii.Bool(true),
			Environment: &env,
			// ECS injects the API tokens; converge reads them from its environment.
			Secrets: &map[string]awsecs.Secret{
				"CONVERGE_ADMIN_TOKENS": awsecs.Secret_FromSecretsManager(adminToken, nil),
				"CONVERGE_READ_TOKENS":  awsecs.Secret_FromSecretsManager(metricsSecret, jsii.String("token")),
			},
			PortMappings: &[]*awsecs.PortMapping{{ContainerPort: jsii.Number(apiPort)}, {ContainerPort: jsii.Number(healthPort)}},
			Logging:      awsecs.LogDrivers_AwsLogs(&awsecs.AwsLogDriverProps{StreamPrefix: jsii.String(r.role), LogGroup: logs}),
		})
		if r.scrapeMetrics {
			addMetricsAgent(stack, td, cfg.CloudWatchAgentImage, metricsSecret, logs)
		}
		sg := awsec2.NewSecurityGroup(stack, jsii.String(r.name+"Sg"), &awsec2.SecurityGroupProps{
			Vpc: vpc, Description: jsii.String("Converge " + r.role + " tasks"),
		})
		svc := awsecs.NewFargateService(stack, jsii.String(r.name), &awsecs.FargateServiceProps{
			Cluster: cluster, TaskDefinition: td, DesiredCount: jsii.Number(1),
			AssignPublicIp: jsii.Bool(true), SecurityGroups: &[]awsec2.ISecurityGroup{sg},
			VpcSubnets:        &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PUBLIC},
			CircuitBreaker:    &awsecs.DeploymentCircuitBreaker{Rollback: jsii.Bool(true)},
			MinHealthyPercent: jsii.Number(100),
		})
		svc.Node().AddDependency(bootstrap)
		db.Connections().AllowDefaultPortFrom(svc, jsii.String("converge "+r.role))
		svc.Connections().AllowFrom(alb, awsec2.Port_Tcp(jsii.Number(apiPort)), jsii.String("load balancer"))
		svc.Connections().AllowFrom(alb, awsec2.Port_Tcp(jsii.Number(float64(r.healthCheckPort))), jsii.String("load balancer health checks"))
		services[r.name] = svc
	}

	// The dispatcher invokes the provider with its task role: exactly the
	// two invoke actions, on that function only.
	services["Dispatch"].TaskDefinition().TaskRole().AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("lambda:InvokeFunction", "lambda:InvokeFunctionUrl"),
		Resources: jsii.Strings(*provider.FunctionArn()),
	}))

	// The API goes to control; the callback routes (/v1/tasks/…) to dispatch.
	listener := alb.AddListener(jsii.String("Https"), &elbv2.BaseApplicationListenerProps{
		Port:         jsii.Number(443),
		Protocol:     elbv2.ApplicationProtocol_HTTPS,
		SslPolicy:    elbv2.SslPolicy_RECOMMENDED_TLS,
		Certificates: &[]elbv2.IListenerCertificate{elbv2.ListenerCertificate_FromArn(jsii.String(cfg.CertificateArn))},
		Open:         jsii.Bool(false),
	})
	listener.AddTargets(jsii.String("Control"), &elbv2.AddApplicationTargetsProps{
		Port: jsii.Number(apiPort), Protocol: elbv2.ApplicationProtocol_HTTP,
		Targets: &[]elbv2.IApplicationLoadBalancerTarget{services["Control"]},
		// /livez never touches the database: a Postgres blip must not drain every task.
		HealthCheck: &elbv2.HealthCheck{Path: jsii.String("/livez")},
	})
	listener.AddTargets(jsii.String("Dispatch"), &elbv2.AddApplicationTargetsProps{
		Priority:   jsii.Number(10),
		Conditions: &[]elbv2.ListenerCondition{elbv2.ListenerCondition_PathPatterns(jsii.Strings("/v1/tasks/*"))},
		Port:       jsii.Number(apiPort), Protocol: elbv2.ApplicationProtocol_HTTP,
		Targets: &[]elbv2.IApplicationLoadBalancerTarget{services["Dispatch"].LoadBalancerTarget(&awsecs.LoadBalancerTargetOptions{
			ContainerName: jsii.String("converge"), ContainerPort: jsii.Number(apiPort),
		})},
		HealthCheck: &elbv2.HealthCheck{Path: jsii.String("/livez"), Port: jsii.String(fmt.Sprint(healthPort))},
	})

	addAlarms(stack, cfg)

	out := func(id, desc string, v *string) {
		awscdk.NewCfnOutput(stack, jsii.String(id), &awscdk.CfnOutputProps{Value: v, Description: jsii.String(desc)})
	}
	out("LoadBalancerDns", "Point "+cfg.DomainName+" (CNAME or alias) here", alb.LoadBalancerDnsName())
	out("ApiUrl", "conctl --server", jsii.String(callbackBase))
	out("AdminTokenSecretArn", "The API's admin token (conctl --token)", adminToken.SecretArn())
	out("ProviderFunctionArn", "target.function of a lambda endpoint", provider.FunctionArn())
	out("ProviderFunctionUrl", "target.url of a lambda_url endpoint", providerURL.Url())
	out("ProviderSigningSecretArn", "The endpoint's secret is whsec_ + this secret's value", signingSecret.SecretArn())
	out("DbClusterEndpoint", "Aurora writer endpoint", db.ClusterEndpoint().Hostname())
	return stack, nil
}

// providerCode is the quickstart provider's package, or a stand-in when the
// zip has not been built and the caller allowed that.
func providerCode(cfg Config) (awslambda.Code, error) {
	if _, err := os.Stat(cfg.ProviderZip); err == nil {
		return awslambda.Code_FromAsset(jsii.String(cfg.ProviderZip), nil), nil
	} else if !cfg.PlaceholderProvider {
		return nil, fmt.Errorf("provider package %s: %w (run `make functions`, or pass -c placeholderProvider=true to synthesize with a stand-in)", cfg.ProviderZip, err)
	}
	// No bootstrap in it: deployed, it fails every invocation, hence opt-in.
	return awslambda.Code_FromAsset(jsii.String("placeholder-provider"), nil), nil
}

// lambdaRole is a function's execution role, allowed to write its own log
// group and nothing else (the managed AWSLambdaBasicExecutionRole would
// allow every log group).
func lambdaRole(stack awscdk.Stack, id string, logs awslogs.LogGroup) awsiam.Role {
	role := awsiam.NewRole(stack, jsii.String(id), &awsiam.RoleProps{
		AssumedBy: awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
	})
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("logs:CreateLogStream", "logs:PutLogEvents"),
		Resources: jsii.Strings(*logs.LogGroupArn()),
	}))
	return role
}

// bootstrapCode runs once, at stack creation: it writes the keys converge
// needs in the exact encodings it validates, the metrics scraper's token and
// config, and creates the database user that logs in with IAM (the Data API
// runs the SQL as the master user). Updates and deletes change nothing.
const bootstrapCode = `import base64, json, os, secrets
import boto3, cfnresponse

SQL = """DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'converge') THEN CREATE ROLE converge LOGIN; END IF;
  GRANT rds_iam TO converge;
  GRANT converge TO CURRENT_USER;
  ALTER DATABASE converge OWNER TO converge;
END $$"""

def handler(event, context):
    try:
        if event["RequestType"] == "Create":
            p = event["ResourceProperties"]
            sm = boto3.client("secretsmanager")
            sm.put_secret_value(SecretId=p["SecretKeyArn"], SecretString=base64.b64encode(os.urandom(32)).decode())
            sm.put_secret_value(SecretId=p["CallbackKeyArn"], SecretString=base64.b64encode(os.urandom(48)).decode())
            token = secrets.token_urlsafe(32)
            sm.put_secret_value(SecretId=p["MetricsArn"], SecretString=json.dumps(
                {"token": token, "prometheus": p["ScrapeConfig"].replace("TOKEN", token)}))
            boto3.client("rds-data").execute_statement(
                resourceArn=p["ClusterArn"], secretArn=p["MasterSecretArn"], database="converge", sql=SQL)
        cfnresponse.send(event, context, cfnresponse.SUCCESS, {}, "bootstrap")
    except Exception as e:
        print(repr(e))
        cfnresponse.send(event, context, cfnresponse.FAILED, {}, "bootstrap")
`

// scrapeConfig is the Prometheus scrape configuration of the metrics agent
// (TOKEN is replaced by the generated read token: /metrics needs one).
var scrapeConfig = fmt.Sprintf(`global:
  scrape_interval: 1m
  scrape_timeout: 10s
scrape_configs:
  - job_name: %s
    authorization:
      credentials: TOKEN
    static_configs:
      - targets: ["localhost:%d"]
`, metricsJob, apiPort)

func newBootstrap(stack awscdk.Stack, db awsrds.DatabaseCluster, secretKey, callbackKey, metrics awssecretsmanager.Secret) awscdk.CustomResource {
	logs := awslogs.NewLogGroup(stack, jsii.String("BootstrapLogs"), &awslogs.LogGroupProps{
		Retention: awslogs.RetentionDays_ONE_MONTH, RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	role := lambdaRole(stack, "BootstrapRole", logs)
	for _, s := range []awssecretsmanager.Secret{secretKey, callbackKey, metrics} {
		s.GrantWrite(role)
	}
	db.Secret().GrantRead(role, nil)
	db.GrantDataApiAccess(role)
	fn := awslambda.NewFunction(stack, jsii.String("Bootstrap"), &awslambda.FunctionProps{
		Runtime:  awslambda.Runtime_PYTHON_3_13(),
		Handler:  jsii.String("index.handler"),
		Code:     awslambda.Code_FromInline(jsii.String(bootstrapCode)),
		Timeout:  awscdk.Duration_Minutes(jsii.Number(2)),
		Role:     role,
		LogGroup: logs,
	})
	cr := awscdk.NewCustomResource(stack, jsii.String("BootstrapRun"), &awscdk.CustomResourceProps{
		ServiceToken: fn.FunctionArn(),
		Properties: &map[string]any{
			"SecretKeyArn":    secretKey.SecretArn(),
			"CallbackKeyArn":  callbackKey.SecretArn(),
			"MetricsArn":      metrics.SecretArn(),
			"ScrapeConfig":    scrapeConfig,
			"ClusterArn":      db.ClusterArn(),
			"MasterSecretArn": db.Secret().SecretArn(),
		},
	})
	// The writer must be up before the SQL runs.
	cr.Node().AddDependency(db)
	return cr
}

// addMetricsAgent runs the CloudWatch agent beside the dispatcher: it scrapes
// /metrics over the task's loopback and writes the two series the alarms need
// as embedded metric format (EMF) logs, which CloudWatch turns into metrics.
// Counters arrive as the delta since the previous scrape.
func addMetricsAgent(stack awscdk.Stack, td awsecs.FargateTaskDefinition, image string, metrics awssecretsmanager.Secret, logs awslogs.LogGroup) {
	emf := awslogs.NewLogGroup(stack, jsii.String("MetricsEmf"), &awslogs.LogGroupProps{
		Retention: awslogs.RetentionDays_ONE_WEEK, RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	td.TaskRole().AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"),
		Resources: jsii.Strings(*emf.LogGroupArn()),
	}))
	agentCfg, err := json.Marshal(map[string]any{
		"agent": map[string]any{"debug": false},
		"logs": map[string]any{"metrics_collected": map[string]any{"prometheus": map[string]any{
			"log_group_name":         "LOG_GROUP",
			"prometheus_config_path": "env:PROMETHEUS_CONFIG_CONTENT",
			"emf_processor": map[string]any{
				"metric_namespace": metricsNamespace,
				"metric_declaration": []any{
					map[string]any{
						"source_labels":    []string{"job", "result"},
						"label_matcher":    "^" + metricsJob + ";(" + failedResults + ")$",
						"dimensions":       [][]string{{"job"}},
						"metric_selectors": []string{"^converge_dispatch_deliveries_total$"},
					},
					map[string]any{
						"source_labels":    []string{"job"},
						"label_matcher":    "^" + metricsJob + "$",
						"dimensions":       [][]string{{"job"}},
						"metric_selectors": []string{"^converge_dispatch_pending_tasks$"},
					},
				},
			},
		}}},
	})
	if err != nil {
		panic(err) // a literal map always marshals
	}
	td.AddContainer(jsii.String("cloudwatch-agent"), &awsecs.ContainerDefinitionOptions{
		Image:     awsecs.ContainerImage_FromRegistry(jsii.String(image), nil),
		Essential: jsii.Bool(false), // metrics lost, deliveries go on
		Environment: &map[string]*string{
			"CW_CONFIG_CONTENT": awscdk.Fn_Sub(jsii.String(strings.ReplaceAll(string(agentCfg), "LOG_GROUP", "${Emf}")),
				&map[string]*string{"Emf": emf.LogGroupName()}),
		},
		Secrets: &map[string]awsecs.Secret{
			"PROMETHEUS_CONFIG_CONTENT": awsecs.Secret_FromSecretsManager(metrics, jsii.String("prometheus")),
		},
		Logging: awsecs.LogDrivers_AwsLogs(&awsecs.AwsLogDriverProps{StreamPrefix: jsii.String("cloudwatch-agent"), LogGroup: logs}),
	})
}

// addAlarms raises an alarm (to an SNS topic the operator subscribes to) on
// failed deliveries and on the queue's depth, from the agent's metrics.
func addAlarms(stack awscdk.Stack, cfg Config) {
	topic := awssns.NewTopic(stack, jsii.String("Alarms"), &awssns.TopicProps{DisplayName: jsii.String("Converge alarms")})
	dims := &map[string]*string{"job": jsii.String(metricsJob)}
	failed := awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace: jsii.String(metricsNamespace), MetricName: jsii.String("converge_dispatch_deliveries_total"),
		DimensionsMap: dims, Statistic: jsii.String("Sum"), Period: awscdk.Duration_Minutes(jsii.Number(5)),
	})
	pending := awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace: jsii.String(metricsNamespace), MetricName: jsii.String("converge_dispatch_pending_tasks"),
		// One scrape a minute: the per-minute sum adds every pod's shard range and kind.
		DimensionsMap: dims, Statistic: jsii.String("Sum"), Period: awscdk.Duration_Minutes(jsii.Number(1)),
	})
	for _, a := range []struct {
		id, desc  string
		metric    awscloudwatch.Metric
		threshold float64
		periods   float64
	}{
		{"FailedDeliveries", "Deliveries the providers did not take (5xx, timeouts, network, throttling…) in 5 minutes", failed, cfg.FailedDeliveriesThreshold, 1},
		{"QueueDepth", "Tasks waiting to be claimed, for 10 minutes running", pending, cfg.QueueDepthThreshold, 10},
	} {
		alarm := a.metric.CreateAlarm(stack, jsii.String(a.id+"Alarm"), &awscloudwatch.CreateAlarmOptions{
			AlarmDescription:   jsii.String(a.desc),
			Threshold:          jsii.Number(a.threshold),
			EvaluationPeriods:  jsii.Number(a.periods),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		alarm.AddAlarmAction(awscloudwatchactions.NewSnsAction(topic))
	}
	awscdk.NewCfnOutput(stack, jsii.String("AlarmTopicArn"), &awscdk.CfnOutputProps{
		Value: topic.TopicArn(), Description: jsii.String("Subscribe to receive the alarms"),
	})
}
