#!/usr/bin/env python3
"""Translate a SAM template into plain CloudFormation JSON on stdout.

    scripts/sam-translate.py [--code-bucket BUCKET] [--region REGION] [TEMPLATE]

TEMPLATE defaults to template.yaml. The output is what CloudFormation's
AWS::Serverless-2016-10-31 transform makes of it after `sam package`, by aws-sam-translator's
public entry point (samtranslator.translator.transform.transform), without an AWS account
or network:

- A function's local CodeUri (a folder such as functions/quickstart) becomes
  s3://BUCKET/<that folder>: the key under which the caller uploads the folder's package,
  as `sam package` would; the translator accepts only S3 locations.
- A managed policy a function's Policies give by name resolves from the translator's
  bundled list of AWS managed policies. For a name beyond it the translator asks the
  loader passed to transform(), whose default lists the account's policies through IAM;
  the one here knows none, so nothing calls AWS and the name stays as written, which
  cfn-lint then rejects as a policy ARN (E3031). template.yaml names none.
- The pseudo parameters take placeholder values (REGION, account 123456789012) where the
  translator needs them; the output keeps the template's intrinsic functions.

`make check-sam` cfn-lints its output; make rehearse-aws deploys it into moto_server.
"""

import argparse
import json
import os
import sys

from samtranslator.model.exceptions import InvalidDocumentException
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class OfflineManagedPolicies:
    """The managed-policy loader transform() asks for names beyond its bundled list: none."""

    def load(self) -> dict:
        return {}


def package_code_uris(template: dict, bucket: str) -> None:
    """Replaces each function's local CodeUri with the S3 location `sam package` gives it."""
    for resource in template.get("Resources", {}).values():
        props = resource.get("Properties", {})
        uri = props.get("CodeUri")
        if resource.get("Type") == "AWS::Serverless::Function" and isinstance(uri, str) and not uri.startswith("s3://"):
            props["CodeUri"] = f"s3://{bucket}/{uri}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("template", nargs="?", default="template.yaml")
    ap.add_argument("--code-bucket", default="code-bucket",
                    help="the bucket local CodeUri folders are uploaded to (default: code-bucket)")
    ap.add_argument("--region", default="us-east-1", help="the region ARNs are generated for")
    args = ap.parse_args()
    # The translator reads the region from a boto3 session, which reads it from here.
    os.environ["AWS_DEFAULT_REGION"] = args.region

    with open(args.template, encoding="utf-8") as f:
        template = yaml_parse(f.read())
    package_code_uris(template, args.code_bucket)
    params = {"AWS::Region": args.region, "AWS::AccountId": "123456789012", "AWS::Partition": "aws"}
    try:
        cfn = transform(template, params, OfflineManagedPolicies(), passthrough_metadata=True)
    except InvalidDocumentException as e:
        for cause in e.causes:
            print(f"sam-translate: {args.template}: {cause.message}", file=sys.stderr)
        return 1
    json.dump(cfn, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
