#!/usr/bin/env python3
"""Translate a SAM template into plain CloudFormation, offline.

    scripts/sam-translate.py [--region R] [--code-bucket B] TEMPLATE OUTPUT

writes OUTPUT as JSON: what CloudFormation's AWS::Serverless-2016-10-31 transform makes
of TEMPLATE after `sam package`. It uses aws-sam-translator's public entry point
(samtranslator.translator.transform.transform) and needs no AWS account or network:

- Each function's local CodeUri (a folder) becomes s3://BUCKET/<folder name>.zip, where
  `sam package` would have uploaded it; the translator accepts only S3 locations.
- The translator asks for the account's managed policies only to resolve a policy given
  by name in a function's Policies; the map here is empty, so such a name fails the
  translation instead of calling IAM.
- The pseudo parameters take placeholder values (REGION, account 123456789012); the
  output keeps every intrinsic function as written.

`make check-sam` runs it into bin/sam/ and cfn-lints the result.
"""

import argparse
import json
import os
import sys

from samtranslator.model.exceptions import InvalidDocumentException
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class OfflineManagedPolicies:
    """The managed-policy loader transform() calls: no policy is known by name."""

    def load(self) -> dict:
        return {}


def package_code_uris(template: dict, bucket: str) -> None:
    """Replaces each function's local CodeUri with the S3 location `sam package` gives it."""
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = resource.setdefault("Properties", {})
        uri = props.get("CodeUri")
        if isinstance(uri, str) and not uri.startswith("s3://"):
            props["CodeUri"] = f"s3://{bucket}/{os.path.basename(os.path.normpath(uri))}.zip"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("template")
    parser.add_argument("output")
    parser.add_argument("--region", default="us-east-1", help="the AWS::Region to translate for")
    parser.add_argument("--code-bucket", default="converge-sam-artifacts",
                        help="the bucket the function code would be packaged into")
    args = parser.parse_args()

    with open(args.template, encoding="utf-8") as f:
        template = yaml_parse(f.read())
    package_code_uris(template, args.code_bucket)
    # The translator reads the region from a boto3 session, which reads it from here.
    os.environ["AWS_DEFAULT_REGION"] = args.region
    params = {"AWS::Region": args.region, "AWS::AccountId": "123456789012", "AWS::Partition": "aws"}
    try:
        translated = transform(template, params, OfflineManagedPolicies())
    except InvalidDocumentException as e:
        for cause in e.causes:
            print(f"sam-translate: {args.template}: {cause.message}", file=sys.stderr)
        return 1

    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(translated, f, indent=2, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
