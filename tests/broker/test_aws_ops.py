"""Naming the operation of a request as botocore itself serialises it (the request is caught before it is sent)."""
from __future__ import annotations

from urllib.parse import parse_qsl

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from broker.aws_ops import Call, ServiceModels, needs_body, operation_of, resource_of

MODELS = ServiceModels()


def captured(service: str, operation: str, params: dict, endpoint: str | None = None, **config) -> Call:
    from botocore.config import Config
    client = boto3.client(service, region_name="us-east-1", aws_access_key_id="AKIAX", aws_secret_access_key="x",
                          endpoint_url=endpoint, config=Config(**config) if config else None)
    seen = {}

    def grab(request, **_kw):
        seen["req"] = request
        return AWSResponse(request.url, 599, {}, None)

    client.meta.events.register("before-send", grab)
    try:
        getattr(client, client.meta.method_to_api_mapping and {v: k for k, v in
                                                                client.meta.method_to_api_mapping.items()}[operation])(**params)
    except Exception:  # noqa: BLE001 - the fake response is an error; the request was seen
        pass
    req = seen["req"]
    scheme, _, rest = req.url.partition("://")
    host, _, path = rest.partition("/")
    path, _, query = ("/" + path).partition("?")
    body = req.body if isinstance(req.body, bytes) else (req.body.encode() if isinstance(req.body, str) else b"")
    return Call(service=req.context.get("signing", {}).get("signing_name") or client.meta.service_model.signing_name,
                method=req.method, host=host, path=path,
                query=tuple(parse_qsl(query, keep_blank_values=True)),
                headers={k.lower(): (v.decode() if isinstance(v, bytes) else v) for k, v in req.headers.items()},
                body=body)


CASES = [
    ("s3", "ListBuckets", {}),
    ("s3", "CreateBucket", {"Bucket": "bkt"}),
    ("s3", "GetObject", {"Bucket": "bkt", "Key": "a/b c.txt"}),
    ("s3", "PutObject", {"Bucket": "bkt", "Key": "k", "Body": b"x"}),
    ("s3", "DeleteObject", {"Bucket": "bkt", "Key": "k"}),
    ("s3", "DeleteObjects", {"Bucket": "bkt", "Delete": {"Objects": [{"Key": "k"}]}}),
    ("s3", "ListObjectsV2", {"Bucket": "bkt"}),
    ("s3", "ListObjects", {"Bucket": "bkt"}),
    ("s3", "UploadPart", {"Bucket": "bkt", "Key": "k", "PartNumber": 1, "UploadId": "u", "Body": b"x"}),
    ("s3", "CreateMultipartUpload", {"Bucket": "bkt", "Key": "k"}),
    ("s3", "CompleteMultipartUpload", {"Bucket": "bkt", "Key": "k", "UploadId": "u"}),
    ("s3", "PutBucketPolicy", {"Bucket": "bkt", "Policy": "{}"}),
    ("s3", "GetBucketAcl", {"Bucket": "bkt"}),
    ("s3", "DeleteBucket", {"Bucket": "bkt"}),
    ("ec2", "TerminateInstances", {"InstanceIds": ["i-123"]}),
    ("ec2", "DescribeInstances", {}),
    ("ec2", "StopInstances", {"InstanceIds": ["i-1"]}),
    ("iam", "CreateAccessKey", {"UserName": "u"}),
    ("iam", "ListUsers", {}),
    ("sts", "AssumeRole", {"RoleArn": "arn:aws:iam::1:role/r", "RoleSessionName": "sess"}),
    ("sts", "GetCallerIdentity", {}),
    ("dynamodb", "DeleteTable", {"TableName": "t"}),
    ("dynamodb", "GetItem", {"TableName": "t", "Key": {"k": {"S": "v"}}}),
    ("lambda", "DeleteFunction", {"FunctionName": "f"}),
    ("lambda", "Invoke", {"FunctionName": "f"}),
    ("ecr", "GetAuthorizationToken", {}),
    ("sso", "GetRoleCredentials", {"roleName": "r", "accountId": "1", "accessToken": "t"}),
    ("cognito-identity", "GetCredentialsForIdentity", {"IdentityId": "us-east-1:x"}),
    ("sqs", "DeleteQueue", {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/1/q"}),
    ("kms", "Decrypt", {"CiphertextBlob": b"x"}),
]


@pytest.mark.parametrize("service,operation,params", CASES)
@pytest.mark.parametrize("style", ["default", "path", "custom"])
def test_botocore_requests_name_their_operation(service, operation, params, style):
    kw = {}
    endpoint = None
    if style == "path":
        kw = {"s3": {"addressing_style": "path"}}
    if style == "custom":
        endpoint = "https://127.0.0.1:4566"
    call = captured(service, operation, params, endpoint, **kw)
    index = MODELS.load(call.service)
    assert index is not None
    if needs_body(index, call.method, call.headers):
        assert operation_of(index, Call(**{**call.__dict__, "body": None})) in ("", operation)
    assert operation_of(index, call) == operation


def test_resources_and_unknowns():
    call = captured("s3", "DeleteObject", {"Bucket": "bkt", "Key": "dir/x y"})
    assert resource_of(MODELS.load("s3"), call) == "bkt/dir/x y"
    call = captured("ec2", "TerminateInstances", {"InstanceIds": ["i-1", "i-2"]})
    assert resource_of(MODELS.load("ec2"), call) == "i-1, i-2"
    call = captured("dynamodb", "DeleteTable", {"TableName": "orders"})
    assert resource_of(MODELS.load("dynamodb"), call) == "orders"
    assert MODELS.load("no-such-service") is None
    assert operation_of(None, call) == ""
    weird = Call("s3", "PATCH", "s3.amazonaws.com", "/b", ())
    assert operation_of(MODELS.load("s3"), weird) == ""
    spoof = Call("dynamodb", "POST", "dynamodb.us-east-1.amazonaws.com", "/", (),
                 {"x-amz-target": "Other_1.DeleteTable"})
    assert operation_of(MODELS.load("dynamodb"), spoof) == ""


def test_an_operation_named_twice_is_ambiguous():
    from broker.aws_ops import ambiguous
    form = {"content-type": "application/x-www-form-urlencoded; charset=utf-8"}
    one = Call("ec2", "POST", "ec2.amazonaws.com", "/", (("Action", "DescribeInstances"),), form,
               b"Action=DescribeInstances&Version=2016-11-15")
    assert not ambiguous(one)
    two = Call("ec2", "POST", "ec2.amazonaws.com", "/", (("Action", "TerminateInstances"),), form,
               b"Action=DescribeInstances&Version=2016-11-15")
    assert ambiguous(two)
    assert ambiguous(Call("ec2", "POST", "h", "/", (), form, b"Action=A&Action=B"))
    assert ambiguous(Call("dynamodb", "POST", "h", "/", (), {}), ["x-amz-target"])
