// Plugin field values built from text, typed by a creator's advertised field list.
// Shared by the describe and harness tools.
#pragma once

#include "NvInferRuntime.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace
{

// Field values given on the command line, owned here, typed by the creator's field list.
struct FieldValues
{
    std::vector<std::unique_ptr<char[]>> storage;
    std::vector<nvinfer1::PluginField> fields;
    nvinfer1::PluginFieldCollection fc{};

    FieldValues() = default;
    FieldValues(FieldValues const&) = delete;
    FieldValues& operator=(FieldValues const&) = delete;

    void add(char const* name, nvinfer1::PluginFieldType type, std::string const& text)
    {
        int32_t length = 1;
        std::unique_ptr<char[]> buf;
        if (type == nvinfer1::PluginFieldType::kFLOAT32)
        {
            buf.reset(new char[sizeof(float)]);
            float v = std::stof(text);
            memcpy(buf.get(), &v, sizeof(v));
        }
        else if (type == nvinfer1::PluginFieldType::kINT32)
        {
            buf.reset(new char[sizeof(int32_t)]);
            int32_t v = std::stoi(text);
            memcpy(buf.get(), &v, sizeof(v));
        }
        else
        {
            // Like the ONNX importer: the bytes, no terminator counted.
            buf.reset(new char[text.size() + 1]);
            memcpy(buf.get(), text.c_str(), text.size() + 1);
            length = static_cast<int32_t>(text.size());
        }
        fields.emplace_back(name, buf.get(), type, length);
        storage.push_back(std::move(buf));
        fc.nbFields = static_cast<int32_t>(fields.size());
        fc.fields = fields.data();
    }
};

} // namespace
