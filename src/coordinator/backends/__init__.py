"""Store backends, each meeting the contract of :mod:`coordinator.store`:

- :mod:`coordinator.backends.memory` (``memory://``): a lock and a dict, for the life of the process;
- :mod:`coordinator.backends.local` (plain paths, ``file:``): a temp file linked to its final name, fsynced;
- :mod:`coordinator.backends.s3` (``s3://``): ``PutObject`` with ``If-None-Match: *`` (imports s3fs and botocore);
- :mod:`coordinator.backends.azure` (``az://``, ``abfs://``, ``abfss://``): Put Blob with ``If-None-Match: *``
  (imports adlfs and azure-storage-blob: the ``azure`` extra);
- :mod:`coordinator.backends.gcs` (``gs://``, ``gcs://``): a multipart upload with ``ifGenerationMatch=0`` (imports
  gcsfs, the ``gcs`` extra);
- :mod:`coordinator.backends.cloud`: what the S3, Azure and GCS backends share (bucket URLs, the retry loop, the
  read-back of an ambiguous conditional write, credential scrubbing); it imports no client library.

Open one from a URL with :func:`coordinator.open_store` (:mod:`coordinator.store_factory`); backends never import the
factory.
"""
