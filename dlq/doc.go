// Package dlq builds dead-letter records and reads them back.
//
// A dead letter keeps the request's key, value and user headers (configured
// headers redacted) and carries every redrive-* header of the contract: id,
// attempt, polls, origin, first/last error time, error, code, class, reason,
// redrives, group and instance. A record that would not fit the DLQ's
// max.message.bytes gets a truncated value, marked redrive-truncated.
//
// Compatibility headers (BuildOptions.HeaderStyle), added beside redrive's
// own so that existing dead-letter tooling can read redrive's records:
//
//	style    header                                   value
//	spring   kafka_dlt-original-topic                 topic name (UTF-8)
//	spring   kafka_dlt-original-partition             4-byte big-endian int32
//	spring   kafka_dlt-original-offset                8-byte big-endian int64
//	spring   kafka_dlt-original-timestamp             8-byte big-endian int64 (ms)
//	spring   kafka_dlt-exception-message              redrive-error (UTF-8)
//	spring   kafka_dlt-exception-fqcn                 redrive.<class> (e.g. redrive.transient)
//	connect  __connect.errors.topic                   topic name
//	connect  __connect.errors.partition               decimal text
//	connect  __connect.errors.offset                  decimal text
//	connect  __connect.errors.exception.class.name    redrive.<class>
//	connect  __connect.errors.exception.message       redrive-error
//
// Spring Kafka writes partition, offset and timestamp as big-endian binary
// numbers and Kafka Connect writes its headers as strings; both are matched.
//
// The package builds and decodes records; it never produces or consumes.
package dlq
