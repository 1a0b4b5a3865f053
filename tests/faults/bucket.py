"""A bucket of the real S3 server of the tests, reached directly (never through a fault
proxy): what it holds, and putting back what it held, so every explored state starts from
its template's objects."""

from __future__ import annotations

from typing import Any

__all__ = ["Bucket"]


class Bucket:
    """The objects of one bucket (``client``: a boto3 S3 client of the server itself)."""

    def __init__(self, client: Any, bucket: str) -> None:
        self.s3 = client
        self.bucket = bucket
        self._bodies: dict[tuple[str, str], tuple[bytes, str | None]] = {}

    def objects(self) -> dict[str, dict[str, Any]]:
        """Every object of the bucket: key -> its ETag, body, metadata and content type."""
        found: dict[str, dict[str, Any]] = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            for item in page.get("Contents", []):
                found[item["Key"]] = {"etag": item["ETag"]}
        for key, entry in found.items():
            reply = self.s3.get_object(Bucket=self.bucket, Key=key)
            entry.update(
                body=reply["Body"].read(),
                metadata=reply.get("Metadata", {}),
                content_type=reply.get("ContentType"),
            )
        return found

    def body(self, key: str, etag: str) -> tuple[bytes, str | None]:
        """An object's bytes and stored SHA-256 (an ETag names its bytes: read once)."""
        known = self._bodies.get((key, etag))
        if known is None:
            reply = self.s3.get_object(Bucket=self.bucket, Key=key)
            known = (reply["Body"].read(), reply.get("Metadata", {}).get("sha256"))
            if reply["ETag"] == etag:
                self._bodies[(key, etag)] = known
        return known

    def etags(self) -> dict[str, str]:
        found = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            for item in page.get("Contents", []):
                found[item["Key"]] = item["ETag"]
        return found

    def put(self, key: str, entry: dict[str, Any]) -> None:
        extra = {"ContentType": entry["content_type"]} if entry.get("content_type") else {}
        self.s3.put_object(
            Bucket=self.bucket, Key=key, Body=entry["body"], Metadata=entry["metadata"], **extra
        )

    def restore_objects(self, objects: dict[str, dict[str, Any]]) -> None:
        """Make the bucket hold exactly ``objects`` (unchanged objects are left alone)."""
        now = self.etags()
        stale = [k for k, etag in now.items() if objects.get(k, {}).get("etag") != etag]
        for start in range(0, len(stale), 1000):
            self.s3.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in stale[start : start + 1000]]},
            )
        for key, entry in objects.items():
            if now.get(key) != entry["etag"]:
                self.put(key, entry)
