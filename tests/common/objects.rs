//! Where a test's store lives (a temporary folder, or a fresh bucket on the
//! LocalStack S3 server that scripts/test.sh starts on 127.0.0.1:4566), and
//! raw access to its objects, bypassing detafs, to damage or inspect them.

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

pub const S3_ENDPOINT: &str = "http://127.0.0.1:4566";

/// The environment an S3 client of the test server needs.
pub const S3_ENV: [(&str, &str); 4] = [
    ("AWS_ENDPOINT_URL", S3_ENDPOINT),
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
    ("AWS_REGION", "us-east-1"),
];

/// Which kind of store `Env::empty` gives: `DETAFS_TEST_STORE=s3` or
/// `azure` runs the same tests against S3 or Azure Blob Storage.
pub fn store_by_default() -> String {
    std::env::var("DETAFS_TEST_STORE").unwrap_or_default()
}

/// The Azurite container (scripts/azurite.sh creates it) that holds each
/// test's store under a prefix of its own.
pub const AZURE_CONTAINER: &str = "detafs";

/// The environment an Azure client of the Azurite test server needs.
pub const AZURE_ENV: [(&str, &str); 1] = [("AZURE_STORAGE_USE_EMULATOR", "true")];

/// A direct client of the Azurite test container, under `prefix`.
pub fn azure_store(prefix: &str) -> Arc<dyn ObjectStore> {
    let az = object_store::azure::MicrosoftAzureBuilder::new()
        .with_use_emulator(true)
        .with_container_name(AZURE_CONTAINER)
        .build()
        .unwrap();
    Arc::new(object_store::prefix::PrefixStore::new(az, prefix))
}

/// Creates a bucket on the test server at `endpoint`; panics (never
/// skips) when the server is not running.
pub fn new_bucket(endpoint: &str) -> String {
    new_bucket_with(endpoint, &[])
}

/// `new_bucket` with these headers on its creation (Object Lock enabled:
/// `x-amz-bucket-object-lock-enabled: true`).
pub fn new_bucket_with(endpoint: &str, headers: &[&str]) -> String {
    let bucket = format!("t{}", hex::encode(rand::random::<[u8; 8]>()));
    let headers = headers.iter().flat_map(|h| ["-H", h]);
    let out = Command::new("curl")
        .args(["-fsS", "-X", "PUT", &format!("{endpoint}/{bucket}")])
        .args(headers)
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "cannot create a bucket on the S3 test server at {endpoint} ({}); start it with scripts/localstack.sh",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    bucket
}

/// A direct client of `bucket` on the test server at `endpoint`, under `prefix`.
pub fn s3_store(endpoint: &str, bucket: &str, prefix: &str) -> Arc<dyn ObjectStore> {
    let s3 = AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .build()
        .unwrap();
    if prefix.is_empty() {
        Arc::new(s3)
    } else {
        Arc::new(object_store::prefix::PrefixStore::new(s3, prefix))
    }
}

/// Raw access to the objects of one store.
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Runtime,
}

impl Objects {
    pub fn local(dir: &Path) -> Objects {
        std::fs::create_dir_all(dir).unwrap();
        Objects::new(Arc::new(LocalFileSystem::new_with_prefix(dir).unwrap()))
    }

    /// The bucket's objects under `prefix` (which must match the store URL's).
    pub fn s3(endpoint: &str, bucket: &str, prefix: &str) -> Objects {
        Objects::new(s3_store(endpoint, bucket, prefix))
    }

    /// The test container's objects under `prefix`.
    pub fn azure(prefix: &str) -> Objects {
        Objects::new(azure_store(prefix))
    }

    fn new(store: Arc<dyn ObjectStore>) -> Objects {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        Objects { store, rt }
    }

    /// (key, size) of every object under `prefix`, sorted by key.
    pub fn list(&self, prefix: &str) -> Vec<(String, u64)> {
        use futures::TryStreamExt;
        let p = Key::from(prefix);
        let mut out: Vec<_> = self
            .rt
            .block_on(self.store.list(Some(&p)).try_collect::<Vec<_>>())
            .unwrap()
            .into_iter()
            .map(|m| (m.location.to_string(), m.size))
            .collect();
        out.sort();
        out
    }

    pub fn read(&self, key: &str) -> Vec<u8> {
        let k = Key::from(key);
        self.rt
            .block_on(async { self.store.get(&k).await?.bytes().await })
            .unwrap_or_else(|e| panic!("read {key}: {e}"))
            .to_vec()
    }

    pub fn exists(&self, key: &str) -> bool {
        self.rt.block_on(self.store.head(&Key::from(key))).is_ok()
    }

    pub fn write(&self, key: &str, data: Vec<u8>) {
        self.rt
            .block_on(self.store.put(&Key::from(key), PutPayload::from(data)))
            .unwrap();
    }

    pub fn delete(&self, key: &str) {
        self.rt
            .block_on(self.store.delete(&Key::from(key)))
            .unwrap();
    }

    /// The largest object under `prefix`.
    pub fn largest(&self, prefix: &str) -> String {
        let mut all = self.list(prefix);
        all.sort_by_key(|(_, size)| *size);
        all.pop().expect("no objects").0
    }
}

/// `x-amz-server-side-encryption` of every object under the store, as the
/// S3 server reports it (HEAD, through boto3).
pub fn sse_of_objects(env: &super::Env) -> Vec<String> {
    let bucket = env.bucket.clone().unwrap();
    let script = format!(
        "import boto3\n\
         s3 = boto3.client('s3', endpoint_url='{}', aws_access_key_id='test', \
         aws_secret_access_key='test', region_name='us-east-1')\n\
         for o in s3.list_objects_v2(Bucket='{bucket}', Prefix='store/').get('Contents', []):\n\
         \x20   print(s3.head_object(Bucket='{bucket}', Key=o['Key']).get('ServerSideEncryption'))\n",
        S3_ENDPOINT
    );
    super::run_ok(Command::new("python3").args(["-c", &script]))
        .lines()
        .map(str::to_string)
        .collect()
}
